package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// toolServerRetry is how soon a run parked on an unreachable MCP server
// looks again by itself (fixing its Secret retries at once).
const toolServerRetry = 30 * time.Second

// toolListTTL bounds how long a server's tool list (and so a tool's effect
// from its annotations) is trusted before it is listed again.
const toolListTTL = time.Minute

// resolvedTool is the next tool call's server, ready to call.
type resolvedTool struct {
	server mcptool.Server
	effect string
}

// toolFacts finds out what Decide needs about the run's next tool call: is
// it a built-in tool or one a blueprint server offers, its effect (the
// blueprint's override, else the server's annotations, else write), and
// whether its server can be used now (its token Secret, its reachability).
func (r *AgentRunReconciler) toolFacts(ctx context.Context, run *arv1.AgentRun, f *facts, inFlight map[int64]bool) error {
	h := f.State.HeadCall()
	if h == nil {
		return nil
	}
	if in := h.Intent; in != nil {
		key := executor.Key{Run: run.UID, Seq: in.Seq}
		f.InFlight = inFlight[in.Seq]
		_, f.IntentUnstarted = r.unstarted.Load(key)
		if (in.Effect == blueprint.EffectWrite && !f.IntentUnstarted) || f.InFlight {
			return nil // a dangling write waits for a person; nothing to resolve
		}
	}
	if builtin.IsRunTool(h.Name) {
		f.Tool = &runstate.ToolFact{Known: true, Effect: blueprint.EffectRead}
		return nil
	}
	srv, ok := f.Blueprint.ServerFor(h.Name)
	if !ok {
		f.Tool = &runstate.ToolFact{Known: false}
		return nil
	}
	fact := &runstate.ToolFact{Known: true, Server: srv.Name, Effect: blueprint.EffectWrite}
	f.Tool = fact
	override := f.Blueprint.Tools[h.Name].Effect
	conn, block, err := r.toolServer(ctx, run, srv)
	if err != nil {
		return err
	}
	if block != nil {
		fact.Setup = block
		if override != "" {
			fact.Effect = override
		}
		return nil
	}
	tools, err := r.toolCatalog.list(ctx, conn)
	if err != nil {
		retry := f.Now.Add(toolServerRetry)
		fact.Setup, fact.SetupRetryAt = toolServerBlock(run, srv, err), &retry
		if override != "" {
			fact.Effect = override
		}
		return nil
	}
	i := slices.IndexFunc(tools, func(t mcptool.Tool) bool { return t.Name == h.Name })
	if i < 0 {
		fact.Known = false // the server does not offer it (any more)
		return nil
	}
	fact.Effect = string(tools[i].Effect)
	if override != "" {
		fact.Effect = override
	}
	f.tool = &resolvedTool{server: conn, effect: fact.Effect}
	return nil
}

// toolServer reads the server's token Secret, if it has one. A missing
// Secret or key is a NeedsSetup blocker like any credential, and the run
// wakes when the Secret appears.
func (r *AgentRunReconciler) toolServer(ctx context.Context, run *arv1.AgentRun, srv blueprint.MCPServer) (mcptool.Server, *runstate.SetupBlock, error) {
	conn := mcptool.Server{Name: srv.Name, URL: srv.URL}
	if srv.AuthSecret == "" {
		return conn, nil, nil
	}
	ns := run.Namespace
	refs := []string{"Secret/" + srv.AuthSecret}
	var sec corev1.Secret
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: srv.AuthSecret}, &sec); err != nil {
		if !apierrors.IsNotFound(err) {
			return conn, nil, fmt.Errorf("reading Secret %s/%s: %w", ns, srv.AuthSecret, err)
		}
		return conn, &runstate.SetupBlock{Blocker: arv1.BlockerSecretMissing, Refs: refs, Remedy: fmt.Sprintf(
			"Create the Secret %s/%s holding the token of MCP server %q under key %q: kubectl create secret generic %s -n %s --from-literal=%s=<token>",
			ns, srv.AuthSecret, srv.Name, srv.AuthKey, srv.AuthSecret, ns, srv.AuthKey)}, nil
	}
	token := strings.TrimSpace(string(sec.Data[srv.AuthKey]))
	if token == "" {
		return conn, &runstate.SetupBlock{Blocker: arv1.BlockerSecretKeyMissing, Refs: refs, Remedy: fmt.Sprintf(
			"The Secret %s/%s has no non-empty key %q for MCP server %q: kubectl create secret generic %s -n %s --from-literal=%s=<token> --dry-run=client -o yaml | kubectl apply -f -",
			ns, srv.AuthSecret, srv.AuthKey, srv.Name, srv.AuthSecret, ns, srv.AuthKey)}, nil
	}
	conn.Token = token
	return conn, nil, nil
}

// toolServerBlock explains a server that could not be listed. The error
// text never carries the token (mcptool keeps it out).
func toolServerBlock(run *arv1.AgentRun, srv blueprint.MCPServer, err error) *runstate.SetupBlock {
	b := &runstate.SetupBlock{Blocker: arv1.BlockerToolServerUnavailable}
	var ce *mcptool.CallError
	if errors.As(err, &ce) && (ce.Status == 401 || ce.Status == 403) && srv.AuthSecret != "" {
		b.Refs = []string{"Secret/" + srv.AuthSecret}
		b.Remedy = fmt.Sprintf("MCP server %q (%s) refused the token in Secret %s/%s key %q (HTTP %d). Put a valid token there; the run retries when the Secret changes.",
			srv.Name, srv.URL, run.Namespace, srv.AuthSecret, srv.AuthKey, ce.Status)
		return b
	}
	b.Remedy = clipTo(fmt.Sprintf("MCP server %q at %s could not be used: %v. Check the server and its URL in the blueprint; the run retries every %s.",
		srv.Name, srv.URL, err, toolServerRetry), 1024)
	return b
}

// toolCatalog caches each server's tool list for toolListTTL.
type toolCatalog struct {
	mu sync.Mutex
	m  map[string]catalogEntry
}

type catalogEntry struct {
	tools []mcptool.Tool
	at    time.Time
}

func newToolCatalog() *toolCatalog { return &toolCatalog{m: map[string]catalogEntry{}} }

func (c *toolCatalog) list(ctx context.Context, s mcptool.Server) ([]mcptool.Tool, error) {
	key := s.URL + "|" + tokenHash(s.Token)
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && time.Since(e.at) < toolListTTL {
		return e.tools, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tools, err := mcptool.List(lctx, sharedHTTP, s)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.m[key] = catalogEntry{tools: tools, at: time.Now()}
	c.mu.Unlock()
	return tools, nil
}

// forget drops a server's list, so the next call lists (and so probes) it.
func (c *toolCatalog) forget(s mcptool.Server) {
	c.mu.Lock()
	delete(c.m, s.URL+"|"+tokenHash(s.Token))
	c.mu.Unlock()
}

func tokenHash(t string) string {
	h := sha256.Sum256([]byte(t))
	return hex.EncodeToString(h[:8])
}

// idempotencyKey is the key recorded with a tool call's intent: the run and
// the intent's seq, so every re-execution of that intent carries the same.
func idempotencyKey(run *arv1.AgentRun, seq int64) string {
	return fmt.Sprintf("%s-%d", run.UID, seq)
}

// actTool carries out a tool-call decision.
func (r *AgentRunReconciler) actTool(ctx context.Context, run *arv1.AgentRun, f *facts, a runstate.Action) (actOutcome, error) {
	h := f.State.HeadCall()
	e := journal.Entry{Index: h.Index, Tool: h.Name}
	switch a.Kind {
	case runstate.ActToolDecide:
		d := a.Decision
		e.Kind, e.Gate, e.Approved, e.Auto, e.Expired, e.By, e.Message = journal.ToolCallDecided, d.Gate, d.Approved, d.Auto, d.Expired, d.By, d.Answer
		e.Result = clipTo(d.Reason, 4096)
	case runstate.ActToolComplete:
		c := a.Completion
		e.Kind, e.Result, e.IsError, e.By, e.Message = journal.ToolCallCompleted, clipTo(c.Result, maxToolResult), c.IsError, c.By, c.Answer
		if h.Intent != nil {
			e.Call = h.Intent.Seq
		}
	case runstate.ActToolRetry:
		e.Kind, e.Call, e.By, e.Message = journal.ToolCallRetried, h.Intent.Seq, a.Answer.By, a.Answer.Name
	case runstate.ActAbandon:
		e.Kind, e.By, e.Message = journal.RunAbandoned, a.Answer.By, a.Answer.Name
	case runstate.ActToolCall:
		return r.callTool(ctx, run, f, a)
	}
	return r.record(ctx, run, f, e)
}

// maxToolResult caps a tool result kept in the journal (a ConfigMap entry).
const maxToolResult = 64 << 10

// callTool runs the next tool call: check_agent at once from the cache, an
// MCP tool on an executor worker after journaling its intent.
func (r *AgentRunReconciler) callTool(ctx context.Context, run *arv1.AgentRun, f *facts, a runstate.Action) (actOutcome, error) {
	st := &f.State
	h := st.HeadCall()
	if h.Name == builtin.CheckAgent {
		res, isErr := r.checkAgent(ctx, run, f, h.Arguments)
		return r.record(ctx, run, f, journal.Entry{Kind: journal.ToolCallCompleted, Index: h.Index, Tool: h.Name, Result: res, IsError: isErr})
	}
	if f.tool == nil {
		return actOutcome{}, fmt.Errorf("tool %q is due but its server was not resolved", h.Name)
	}
	intent := journal.Entry{}
	if a.Reissue {
		intent = *h.Intent
	} else {
		// Journal no intent the pool cannot start now: after a crash an
		// unstarted write would look like one that may have happened.
		wake := event.GenericEvent{Object: &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}}}
		if !r.Pool.HasRoom(run.UID, wake) {
			return actOutcome{backpressure: true}, nil
		}
		intent = journal.Entry{
			Seq: st.NextSeq, Kind: journal.ToolCallRequested, At: f.Now, Index: h.Index,
			Tool: h.Name, Input: h.Arguments, Effect: f.tool.effect, Server: f.tool.server.Name,
		}
		intent.IdempotencyKey = idempotencyKey(run, intent.Seq)
		if err := r.journals.Append(ctx, run, intent); err != nil {
			return actOutcome{}, err
		}
		st.Apply(f.Blueprint, intent)
	}
	key := executor.Key{Run: run.UID, Seq: intent.Seq}
	wake := event.GenericEvent{Object: &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}}}
	target, srv := run.DeepCopy(), f.tool.server
	var out actOutcome
	if !r.Pool.Submit(key, wake, func(stepCtx context.Context) { r.runToolCall(stepCtx, target, intent, srv) }) {
		// Journaled but not started (the pool filled meanwhile): this
		// process knows the call never left, so it may start it later
		// whatever its effect.
		r.unstarted.Store(key, struct{}{})
		out.backpressure = true
		return out, nil
	}
	r.unstarted.Delete(key)
	return out, nil
}

// runToolCall runs on an executor worker. Reads and idempotent calls are
// retried on transport failures; a write whose request may have reached
// the server is never retried here: its intent stays without a completion
// and the run parks on NeedsReconciliation for a person to settle.
func (r *AgentRunReconciler) runToolCall(ctx context.Context, run *arv1.AgentRun, intent journal.Entry, srv mcptool.Server) {
	log := ctrl.Log.WithName("tool").WithValues("AgentRun", run.Namespace+"/"+run.Name, "seq", intent.Seq, "tool", intent.Tool)
	started := time.Now()
	var res mcptool.Result
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, r.stepTimeout)
		res, err = mcptool.Call(callCtx, sharedHTTP, srv, intent.Tool, json.RawMessage(intent.Input), intent.IdempotencyKey)
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		var ce *mcptool.CallError
		notSent := errors.As(err, &ce) && ce.NotSent
		if !notSent && intent.Effect == blueprint.EffectWrite {
			break
		}
		backoff := min(500*time.Millisecond<<attempt, 10*time.Second)
		select {
		case <-ctx.Done():
		case <-time.After(backoff + time.Duration(rand.Int64N(int64(backoff/2)))):
		}
	}
	if ctx.Err() != nil {
		if err != nil {
			log.V(1).Info("Tool call cancelled before completion; its intent stays pending")
			return
		}
		// The call finished before the cancel: its result is known, so it
		// is journaled rather than left for a person to reconcile.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	done := journal.Entry{Seq: intent.Seq + 1, Kind: journal.ToolCallCompleted, Call: intent.Seq, At: r.Clock.Now(), Index: intent.Index, Tool: intent.Tool}
	outcome := "ok"
	if err != nil {
		var ce *mcptool.CallError
		switch {
		case errors.As(err, &ce) && ce.NotSent:
			// Never reached the server: safe to issue again once it is back.
			r.toolCatalog.forget(srv)
			outcome = "not_sent"
			done.Kind, done.Message = journal.ToolCallRetried, ""
			done.By = "operator: the call never reached the server (" + clipTo(err.Error(), 200) + ")"
		case intent.Effect == blueprint.EffectWrite:
			metrics.RecordToolCall(srv.Name, intent.Effect, "unsettled", time.Since(started))
			log.Info("Write tool call failed after it may have reached the server; a person must settle it", "error", err.Error())
			return
		default:
			outcome = "failed"
			done.Result, done.IsError = "The tool server failed: "+clipTo(err.Error(), 1000), true
		}
	} else {
		done.Result, done.IsError = clipTo(res.Text, maxToolResult), res.IsError
		if res.IsError {
			outcome = "tool_error"
		}
	}
	metrics.RecordToolCall(srv.Name, intent.Effect, outcome, time.Since(started))
	if err := r.appendCompletion(ctx, run, done); err != nil {
		log.Error(err, "Journaling the tool call's completion failed; a read or idempotent call is issued again, a write waits for a person")
	}
}

// checkAgent is the check_agent tool: a child run's phase, wait and (once
// complete) output, read from the cluster.
func (r *AgentRunReconciler) checkAgent(ctx context.Context, run *arv1.AgentRun, f *facts, args string) (string, bool) {
	var a struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal([]byte(args), &a)
	i := slices.IndexFunc(f.children, func(c arv1.AgentRun) bool { return c.Name == a.Name })
	if i < 0 {
		return fmt.Sprintf("%q is not a sub-agent of this run", a.Name), true
	}
	c := &f.children[i]
	res := map[string]any{"name": c.Name, "phase": c.Status.Phase}
	if w := c.Status.WaitingOn; w != nil {
		res["waitingOn"] = w.Summary
	}
	if fo := c.Status.FinalOutput; fo != nil {
		var cm corev1.ConfigMap
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: fo.ObjectName}, &cm); err == nil {
			res["output"] = clipTo(cm.Data["output"], 16<<10)
		}
	}
	b, _ := json.Marshal(res)
	return string(b), false
}
