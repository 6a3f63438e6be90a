package controllers

// Tool calls: the run's next tool call resolved (a built-in tool, or the
// blueprint MCP server that offers it, with its token and listing),
// journalled as an intent, and carried out off the reconcile path.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/steps"
	"github.com/agentrun-dev/agentrun-operator/internal/toolcatalog"
)

// resolvedTool is the next tool call's server, ready to call.
type resolvedTool struct {
	server mcptool.Server
	effect string
}

// serverConn is a blueprint's MCP server with its token, ready to list or
// call.
type serverConn struct {
	spec   blueprint.MCPServer
	server mcptool.Server
}

// toolFacts finds out what Decide needs about the run's next tool call: is
// it a built-in tool or one a blueprint server offers, its effect (the
// blueprint's override, else the server's annotations, else write), and
// whether its server can be used now (its token Secret, its listing). It
// only reads the tool catalog; a server not listed yet is listed by a step.
func (ts *toolSettler) toolFacts(ctx context.Context, run *arv1.AgentRun, f *facts, inFlight bool) error {
	h := f.State.HeadCall()
	if h == nil {
		return nil
	}
	if in := h.Intent; in != nil {
		f.InFlight = inFlight
		f.IntentUnstarted = ts.unstarted.has(stepKey(run, in.Seq))
		if (in.Effect == blueprint.EffectWrite && !f.IntentUnstarted) || f.InFlight {
			return nil // a dangling write waits for a person; nothing to resolve
		}
	}
	if builtin.IsRunTool(h.Name) {
		f.Tool = &runstate.ToolFact{Known: true, Effect: blueprint.EffectRead}
		return nil
	}
	if a, ok := f.Blueprint.A2AAgent(h.Name); ok {
		ts.a2aToolFacts(run, f, a)
		return nil
	}
	srv, ok := f.Blueprint.ServerIn(f.State.Stage, h.Name)
	if !ok {
		f.Tool = &runstate.ToolFact{Known: false}
		return nil
	}
	fact := &runstate.ToolFact{Known: true, Server: srv.Name, Effect: blueprint.EffectWrite}
	f.Tool = fact
	override := f.Blueprint.Tools[h.Name].Effect
	if override != "" {
		fact.Effect = override
	}
	conn, block, err := ts.toolServer(ctx, run, srv)
	if err != nil || block != nil {
		fact.Setup = block
		return err
	}
	e := ts.lookupTools(run, f, conn)
	switch {
	case e.Pending():
		fact.Pending = true
		return nil
	case e.Unavailable():
		retry := e.RetryAt
		if !retry.After(f.Now) {
			retry = f.Now.Add(toolcatalog.DefaultRetry)
		}
		fact.Setup, fact.SetupRetryAt = toolServerBlock(run, srv, e.Err), &retry
		return nil
	}
	i := slices.IndexFunc(e.Tools, func(t mcptool.Tool) bool { return t.Name == h.Name })
	if i < 0 {
		fact.Known = false // the server does not offer it (any more)
		return nil
	}
	if override == "" {
		fact.Effect = string(e.Tools[i].Effect)
	}
	fact.InputSchema = string(e.Tools[i].InputSchema)
	f.tool = &resolvedTool{server: conn.server, effect: fact.Effect}
	return nil
}

// lookupTools reads a server's catalog entry. A server that must be
// listed is queued for a listing step, and the run is registered to be
// woken by it before the entry is read again, so a listing finishing in
// between is never missed.
func (ts *toolSettler) lookupTools(run *arv1.AgentRun, f *facts, conn serverConn) toolcatalog.Entry {
	key := toolcatalog.KeyIn(run.Namespace, conn.server)
	e := ts.catalog.Lookup(key, f.Now)
	if !e.NeedsListing() && e.State != toolcatalog.Listing {
		return e
	}
	if e.NeedsListing() {
		f.listings = append(f.listings, conn)
	}
	if e.State != toolcatalog.Stale {
		ts.catalog.Wait(key, types.NamespacedName{Namespace: run.Namespace, Name: run.Name})
		e = ts.catalog.Lookup(key, f.Now)
	}
	return e
}

// listTools starts the listings the facts asked for, each on an executor
// step in its server's lane (once the status write succeeded). A full
// pool leaves the listing for when the run is woken with room.
func (ts *toolSettler) listTools(s *scope) {
	for _, conn := range s.facts.listings {
		key := toolcatalog.KeyIn(s.run.Namespace, conn.server)
		if !ts.catalog.Begin(key) {
			continue // already being listed
		}
		step := executor.Step{Key: executor.Key{Run: types.UID("listing:" + string(key))}, Lane: steps.Lane(conn.server), Wake: wakeOf(s.run)}
		ticket, ok := ts.pool.Reserve(step)
		if !ok || ticket == nil {
			ts.catalog.Abort(key)
			s.out.backpressure = s.out.backpressure || !ok
			s.out.serverWait = s.out.serverWait || (!ok && ts.pool.LaneFull(step.Lane))
			continue
		}
		l := steps.Listing{Namespace: s.run.Namespace, Server: conn.server}
		s.start(ticket, func(ctx context.Context) { ts.steps.RunListing(ctx, l) })
		s.aborts = append(s.aborts, func() { ts.catalog.Abort(key) })
	}
	s.facts.listings = nil
	if s.action.Kind == runstate.ActWaitCatalog {
		s.out.catalogWait = true
	}
}

// toolServer reads the server's token Secret, if it has one. A missing
// Secret or key is a NeedsSetup blocker like any credential, and the run
// wakes when the Secret appears.
func (ts *toolSettler) toolServer(ctx context.Context, run *arv1.AgentRun, srv blueprint.MCPServer) (serverConn, *runstate.SetupBlock, error) {
	conn := serverConn{spec: srv, server: mcptool.Server{Name: srv.Name, URL: srv.URL}}
	if srv.AuthSecret == "" {
		return conn, nil, nil
	}
	token, _, block, err := secretValue(ctx, ts.refs, secretCredential{
		ns: run.Namespace, name: srv.AuthSecret, key: srv.AuthKey, placeholder: "token",
		holds: fmt.Sprintf("the token of MCP server %q", srv.Name), owner: fmt.Sprintf("MCP server %q", srv.Name),
	})
	if err != nil || block != nil {
		return conn, block, err
	}
	conn.server.Token = token
	return conn, nil, nil
}

// toolServerBlock explains a server that could not be listed. The error
// text never carries the token (mcptool keeps it out). A refusal of the
// egress policy is its own blocker, with the refusal's remedy.
func toolServerBlock(run *arv1.AgentRun, srv blueprint.MCPServer, err error) *runstate.SetupBlock {
	var refusal *egress.Refusal
	if errors.As(err, &refusal) {
		return &runstate.SetupBlock{Blocker: arv1.BlockerEgressRefused, Remedy: clipTo(fmt.Sprintf(
			"The manager's egress policy refused MCP server %q at %s: %s. %s The run retries every %s.",
			srv.Name, srv.URL, refusal.Error(), refusal.Remedy(), toolcatalog.DefaultRetry), 1024)}
	}
	b := &runstate.SetupBlock{Blocker: arv1.BlockerToolServerUnavailable}
	var ce *mcptool.CallError
	if errors.As(err, &ce) && (ce.Status == 401 || ce.Status == 403) && srv.AuthSecret != "" {
		b.Refs = []string{"Secret/" + srv.AuthSecret}
		b.Remedy = fmt.Sprintf("MCP server %q (%s) refused the token in Secret %s/%s key %q (HTTP %d). Put a valid token there; the run retries when the Secret changes.",
			srv.Name, srv.URL, run.Namespace, srv.AuthSecret, srv.AuthKey, ce.Status)
		return b
	}
	b.Remedy = clipTo(fmt.Sprintf("MCP server %q at %s could not be used: %s. Check the server and its URL in the blueprint; the run retries every %s.",
		srv.Name, srv.URL, stableError(err), toolcatalog.DefaultRetry), 1024)
	return b
}

// localAddr is the "ip:port->" a socket error names its own end by.
var localAddr = regexp.MustCompile(`[0-9A-Fa-f.:\[\]]+:\d+->`)

// stableError is err's text without the local address of the connection
// it failed on: that port is new on every retry, and a remedy that changes
// with it would cost a parked run a status write per retry.
func stableError(err error) string {
	return localAddr.ReplaceAllString(fmt.Sprint(err), "")
}

// idempotencyKey is the key recorded with a tool call's intent: the run and
// the intent's seq, so every re-execution of that intent carries the same.
func idempotencyKey(run *arv1.AgentRun, seq int64) string {
	return fmt.Sprintf("%s-%d", run.UID, seq)
}

// toolEntry is the journal entry of a tool-call decision that needs no
// call: a gate's decision, a result nobody had to call a server for, a
// person's retry or abandon of a dangling write.
func toolEntry(f *facts, a runstate.Action) journal.Entry {
	h := f.State.HeadCall()
	e := journal.Entry{Index: h.Index, Tool: h.Name}
	switch a.Kind {
	case runstate.ActToolDecide:
		d := a.Decision
		e.Kind, e.Gate, e.Approved, e.Auto, e.Expired, e.By, e.Message = journal.ToolCallDecided, d.Gate, d.Approved, d.Auto, d.Expired, d.By, d.Answer
		e.Result, e.Input = clipTo(d.Reason, 4096), d.Args
	case runstate.ActToolComplete:
		c := a.Completion
		e.Kind, e.Result, e.IsError, e.By, e.Message = journal.ToolCallCompleted, clipTo(c.Result, steps.MaxToolResult), c.IsError, c.By, c.Answer
		if h.Intent != nil {
			e.Call = h.Intent.Seq
		}
	case runstate.ActToolRetry:
		e.Kind, e.Call, e.By, e.Message = journal.ToolCallRetried, h.Intent.Seq, a.Answer.By, a.Answer.Name
	case runstate.ActAbandon:
		e.Kind, e.By, e.Message = journal.RunAbandoned, a.Answer.By, a.Answer.Name
	}
	return e
}

// toolIntent is the intent of the MCP tool call the run's head call asks
// for, on its resolved server.
func toolIntent(run *arv1.AgentRun, f *facts) journal.Entry {
	st, h := &f.State, f.State.HeadCall()
	intent := journal.Entry{
		Seq: st.NextSeq, Kind: journal.ToolCallRequested, At: f.Now, Index: h.Index,
		Tool: h.Name, Input: h.Arguments, Effect: f.tool.effect, Server: f.tool.server.Name,
	}
	intent.IdempotencyKey = idempotencyKey(run, intent.Seq)
	return intent
}

// callTool runs the next MCP tool call on an executor step in its
// server's lane (the built-in tools that come this way are act's). The
// intent is recorded in the status this reconcile writes, so a write or
// idempotent call is on record before it starts.
func (ts *toolSettler) callTool(s *scope) (bool, error) {
	f, run := s.facts, s.run
	st := &f.State
	h := st.HeadCall()
	if f.tool == nil {
		return false, fmt.Errorf("tool %q is due but its server was not resolved", h.Name)
	}
	intent := toolIntent(run, f)
	if s.action.Reissue {
		intent = *h.Intent
		intent.Input = h.Arguments
	}
	lane := steps.Lane(f.tool.server)
	ticket, ok := ts.pool.Reserve(ts.runs.stepOf(run, intent.Seq, lane))
	if !ok {
		s.out.backpressure = true
		s.out.serverWait = s.out.serverWait || ts.pool.LaneFull(lane)
		return false, nil
	}
	if !s.action.Reissue {
		st.Apply(f.Blueprint, intent)
	}
	call := steps.ToolCall{Run: steps.RunRef(run), Intent: intent, Server: f.tool.server, Trace: ts.runs.traceParent(s)}
	s.intents = append(s.intents, issuedIntent{key: stepKey(run, intent.Seq), lost: intent.Lost})
	s.start(ticket, func(ctx context.Context) { ts.steps.RunToolCall(ctx, call) })
	return false, nil
}
