package controllers

import (
	"k8s.io/client-go/tools/events"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// toolSettler settles runs' tool calls, apart from the reconciler's other
// jobs: it resolves a run's next call to a built-in tool, an MCP server's
// or an A2A agent (toolcalls.go, toola2a.go), lists servers into the tool
// catalog, evaluates tool policies (toolpolicy.go), works out what a model
// is offered (tooloffer.go) and whether a stage's required tools can be
// called (toolreadiness.go), and starts MCP calls on executor steps. It
// holds only what that takes; the reconciler reaches it through its tools
// field.
type toolSettler struct {
	// catalog holds the servers' listings; steps fill it.
	catalog *toolcatalog.Catalog
	// policies are the tool policies evaluated before each tool call.
	policies *toolPolicies
	// refs reads the servers' token Secrets.
	refs *caches.Refs
	// recorder shows policy decisions as Events.
	recorder events.EventRecorder
	// pool and steps run listings and calls off the reconcile path.
	pool  *executor.Pool
	steps *steps.Runtime
	// unstarted says which intents were never started (wake.go).
	unstarted *unstartedIntents
	// providers are the provider types with a client; a stage of a
	// scripted one is offered no tools.
	providers map[string]providers.Provider
	// runs is the reconciler's side of a call's step.
	runs toolRuns
}

// toolRuns is what settling asks of the reconciler for a call's step.
type toolRuns interface {
	// stepOf is the executor step of a run's call (its fence included).
	stepOf(run *arv1.AgentRun, seq int64, lane string) executor.Step
	// traceParent is where the call's span goes.
	traceParent(s *scope) tracing.Parent
}
