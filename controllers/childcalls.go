package controllers

// Child calls: the agent tools a run uses on its own children
// (wait_for_agent, check_agent, send_to_agent, kill_agent), carried out in the
// reconcile against the child AgentRuns, and the messages a parent leaves
// on a child.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// messageAnnotationPrefix marks a message from a run's parent, written on
// the child by send_to_agent: the key's name part is the message's id (the
// parent's tool call point, so a send retried after a crash writes the
// same key), the value its text. The parent writes the child's metadata
// (as it writes spec.cancel to kill or cascade); the child's status stays
// its own reconcile's alone, and the child journals each message it takes
// in, so a message is shown to its model once, whatever restarts.
const messageAnnotationPrefix = "message.agentrun.dev/"

// maxMessagesPerChild bounds the messages one child is ever sent: they stay
// on it as annotations, which share a 256 KiB budget.
const maxMessagesPerChild = 16

// pendingMessages are the messages on the run, in the order sent.
func pendingMessages(run *arv1.AgentRun) []runstate.Message {
	var out []runstate.Message
	for k, v := range run.Annotations {
		if id, ok := strings.CutPrefix(k, messageAnnotationPrefix); ok {
			out = append(out, runstate.Message{ID: id, Text: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return messageOrder(out[i].ID, out[j].ID) })
	return out
}

// messageOrder orders ids "call-<seq>-<index>" by seq, then index.
func messageOrder(a, b string) bool {
	var as, ai, bs, bi int64
	_, errA := fmt.Sscanf(a, "call-%d-%d", &as, &ai)
	_, errB := fmt.Sscanf(b, "call-%d-%d", &bs, &bi)
	if errA != nil || errB != nil || as == bs && ai == bi {
		return a < b
	}
	return as < bs || as == bs && ai < bi
}

// agentCall carries out an agent tool the decision let through (its name
// resolved among the run's children) and journals the result.
func (r *AgentRunReconciler) agentCall(ctx context.Context, s *scope) error {
	f, run := s.facts, s.run
	h := f.State.HeadCall()
	var args runstate.AgentArgs
	_ = json.Unmarshal([]byte(h.Arguments), &args)
	fact, _ := runstate.ResolveChild(f.Children, run.Name, args.Name)
	child, err := r.childNamed(ctx, run, f, fact.Name)
	if err != nil {
		return err
	}
	e := journal.Entry{Kind: journal.ToolCallCompleted, Index: h.Index, Tool: h.Name}
	switch {
	case child == nil:
		e.Result, e.IsError = fmt.Sprintf("Sub-agent %q has not been created yet; try again.", fact.Name), true
	case h.Name == builtin.CheckAgent:
		e.Result = r.agentReport(ctx, child, false)
	case h.Name == builtin.WaitForAgent:
		e.Result, e.Child = r.agentReport(ctx, child, true), child.Name
	case h.Name == builtin.SendToAgent:
		e.Result, e.IsError, err = r.sendToAgent(ctx, child, f.State.CallPoint(), args.Message)
	case h.Name == builtin.KillAgent:
		e.Result, err = r.killAgent(ctx, child)
	}
	if err != nil {
		return err
	}
	return r.record(ctx, s, e)
}

// childNamed is the run's child of that name: from the cache, else (just
// created, not in the cache yet) from the API server, and only if this run
// controls it. Nil when there is none.
func (r *AgentRunReconciler) childNamed(ctx context.Context, run *arv1.AgentRun, f *facts, name string) (*arv1.AgentRun, error) {
	for i := range f.children {
		if f.children[i].Name == name {
			return &f.children[i], nil
		}
	}
	c := &arv1.AgentRun{}
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading sub-agent %s: %w", name, err)
	}
	if ref := metav1.GetControllerOf(c); ref == nil || ref.UID != run.UID {
		return nil, nil // not this run's: a run acts on its own children only
	}
	return c, nil
}

// agentReport is a child's phase, wait, error and (once complete) output:
// check_agent's peek, and the result wait_for_agent delivers once the
// child is final.
func (r *AgentRunReconciler) agentReport(ctx context.Context, c *arv1.AgentRun, final bool) string {
	res := map[string]any{"name": c.Name, "phase": c.Status.Phase}
	if w := c.Status.WaitingOn; w != nil && !final {
		res["waitingOn"] = w.Summary
	}
	switch {
	case c.Status.Phase == arv1.PhaseCancelled:
		res["error"] = "the sub-agent was cancelled"
	case c.Status.Error != "":
		res["error"] = clipTo(c.Status.Error, 4096)
	}
	if c.Status.FinalOutput != nil {
		if text, ok, err := r.journals.Output(ctx, store.RefOf(c)); err == nil && ok {
			res["output"] = clipTo(text, 16<<10)
		}
	}
	b, _ := json.Marshal(res)
	return string(b)
}

// sendToAgent writes a message on a running child whose current stage
// accepts messages, under the parent call's point (a retry writes the
// same key). Anything else is refused, with the reason, to the model.
func (r *AgentRunReconciler) sendToAgent(ctx context.Context, c *arv1.AgentRun, id, msg string) (string, bool, error) {
	if refusal, err := r.refuseMessage(ctx, c, id); err != nil || refusal != "" {
		return refusal, true, err
	}
	orig := c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[messageAnnotationPrefix+id] = msg
	if err := r.client.Patch(ctx, c, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Sub-agent %q is gone.", c.Name), true, nil
		}
		return "", false, fmt.Errorf("sending a message to sub-agent %s: %w", c.Name, err)
	}
	b, _ := json.Marshal(map[string]any{"name": c.Name, "sent": true, "stage": c.Status.CurrentStage})
	return string(b), false, nil
}

// refuseMessage says why a child cannot take a message now, or "".
func (r *AgentRunReconciler) refuseMessage(ctx context.Context, c *arv1.AgentRun, id string) (string, error) {
	switch {
	case c.Status.Phase.IsTerminal():
		return fmt.Sprintf("Sub-agent %q has finished (%s); it takes no more messages.", c.Name, c.Status.Phase), nil
	case c.Status.BlueprintSnapshot == "" || c.Status.CurrentStage == "":
		return fmt.Sprintf("Sub-agent %q has not started yet; it takes messages once it is in a stage that accepts them.", c.Name), nil
	}
	if _, sent := c.Annotations[messageAnnotationPrefix+id]; sent {
		return "", nil // this very call, retried
	}
	if len(pendingMessages(c)) >= maxMessagesPerChild {
		return fmt.Sprintf("Sub-agent %q has been sent %d messages, the most one sub-agent takes.", c.Name, maxMessagesPerChild), nil
	}
	bp, perr, err := r.snapshotBlueprint(ctx, c.Namespace, c.Status.BlueprintSnapshot)
	if err != nil || perr != nil {
		return fmt.Sprintf("Sub-agent %q's blueprint cannot be read, so whether it accepts messages is not known.", c.Name), err
	}
	if st, _, ok := bp.Stage(c.Status.CurrentStage); !ok || !st.AcceptsMessages {
		return fmt.Sprintf("Sub-agent %q is in stage %q, which does not accept messages (its blueprint does not set accepts_messages = true there).", c.Name, c.Status.CurrentStage), nil
	}
	return "", nil
}

// killAgent cancels a child through its spec.cancel, the way a person
// would; the child's own reconcile then cancels its children in turn.
func (r *AgentRunReconciler) killAgent(ctx context.Context, c *arv1.AgentRun) (string, error) {
	res := map[string]any{"name": c.Name}
	switch {
	case c.Status.Phase.IsTerminal():
		res["phase"], res["cancelled"] = c.Status.Phase, false
		res["note"] = "the sub-agent had already finished"
	case c.Spec.Cancel:
		res["cancelled"] = true
	default:
		orig := c.DeepCopy()
		c.Spec.Cancel = true
		if err := r.client.Patch(ctx, c, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("cancelling sub-agent %s: %w", c.Name, err)
		}
		res["cancelled"] = true
	}
	b, _ := json.Marshal(res)
	return string(b), nil
}
