package controllers

// Child calls: the agent tools a run uses on its own children
// (wait_for_agent, check_agent, send_to_agent, kill_agent), carried out in the
// reconcile against the child AgentRuns, the messages a parent leaves on a
// child, and the drain that hands the parent's model the results of
// children that finished.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
)

// childCalls is what a run does to the runs tied to it, beyond creating
// and cascading to its children (children.Children): the agent tools on
// its children, the drain of their results, and a fork's copy of its
// source's journal (fork.go). It reads those runs and their journals and
// journals what it learns in the run's own; of a child it writes only
// metadata and spec (messages, spec.cancel): a child's status stays its
// own reconcile's.
type childCalls struct {
	// client patches children.
	client client.Client
	// reader reads a child or a source the cache may not show yet.
	reader     client.Reader
	journals   *router.Router
	blueprints *blueprints
}

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
func (cc *childCalls) agentCall(ctx context.Context, s *scope) error {
	f, run := s.facts, s.run
	h := f.State.HeadCall()
	var args runstate.AgentArgs
	_ = json.Unmarshal([]byte(h.Arguments), &args)
	fact, _ := runstate.ResolveChild(f.Children, run.Name, args.Name)
	child, err := cc.childNamed(ctx, run, f, fact.Name)
	if err != nil {
		return err
	}
	e := journal.Entry{Kind: journal.ToolCallCompleted, Index: h.Index, Tool: h.Name}
	switch {
	case child == nil:
		e.Result, e.IsError = fmt.Sprintf("Sub-agent %q has not been created yet; try again.", fact.Name), true
	case h.Name == builtin.CheckAgent:
		e.Result, err = cc.agentReport(ctx, child, false)
	case h.Name == builtin.WaitForAgent:
		e.Result, err = cc.agentReport(ctx, child, true)
		e.Child = child.Name
	case h.Name == builtin.SendToAgent:
		e.Result, e.IsError, err = cc.sendToAgent(ctx, child, f.State.CallPoint(), args.Message)
	case h.Name == builtin.KillAgent:
		e.Result, err = cc.killAgent(ctx, child)
	}
	if err != nil {
		return err
	}
	return recordIn(ctx, cc.journals, s, e)
}

// childNamed is the run's child of that name: from the cache, else (just
// created, not in the cache yet) from the API server, and only if this run
// controls it. Nil when there is none.
func (cc *childCalls) childNamed(ctx context.Context, run *arv1.AgentRun, f *facts, name string) (*arv1.AgentRun, error) {
	for i := range f.children {
		if f.children[i].Name == name {
			return &f.children[i], nil
		}
	}
	c := &arv1.AgentRun{}
	if err := cc.reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: name}, c); err != nil {
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
// check_agent's peek, and the result wait_for_agent and the drain deliver
// once the child is final, which also says whether it succeeded and lists
// the messages it never took in.
func (cc *childCalls) agentReport(ctx context.Context, c *arv1.AgentRun, final bool) (string, error) {
	res := map[string]any{"name": c.Name, "phase": c.Status.Phase}
	if w := c.Status.WaitingOn; w != nil && !final {
		res["waitingOn"] = w.Summary
	}
	if c.Status.Phase.IsTerminal() {
		res["success"] = c.Status.Phase == arv1.PhaseComplete || c.Status.Phase == arv1.PhaseCompleteInteractive
	}
	switch {
	case c.Status.Phase == arv1.PhaseCancelled:
		res["error"] = "the sub-agent was cancelled"
	case c.Status.Error != "":
		res["error"] = clipTo(c.Status.Error, 4096)
	}
	if c.Status.FinalOutput != nil {
		if text, ok, err := cc.journals.Output(ctx, store.RefOf(c)); err == nil && ok {
			res["output"] = clipTo(text, 16<<10)
		}
	}
	if final {
		left, err := cc.messagesNotTakenIn(ctx, c)
		if err != nil {
			return "", err
		}
		if len(left) > 0 {
			res["messagesNotTakenIn"] = left
		}
	}
	b, _ := json.Marshal(res)
	return string(b), nil
}

// messagesNotTakenIn are the messages left on a finished child that it
// never took in (it ended before reaching a stage that accepts messages),
// so the parent learns of them instead of losing them silently. The cache
// keeps a finished run without its annotations, so they are read from the
// API server, once per delivered result.
func (cc *childCalls) messagesNotTakenIn(ctx context.Context, c *arv1.AgentRun) ([]string, error) {
	full := &arv1.AgentRun{}
	if err := cc.reader.Get(ctx, client.ObjectKeyFromObject(c), full); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading sub-agent %s: %w", c.Name, err)
	}
	sent := pendingMessages(full)
	if len(sent) == 0 {
		return nil, nil
	}
	entries, err := cc.journals.Entries(ctx, store.RefOf(c))
	if err != nil {
		return nil, fmt.Errorf("reading the journal of sub-agent %s: %w", c.Name, err)
	}
	taken := map[string]bool{}
	for i := range entries {
		if entries[i].Kind == journal.MessageReceived {
			taken[entries[i].MessageID] = true
		}
	}
	var left []string
	for _, m := range sent {
		if !taken[m.ID] {
			left = append(left, clipTo(m.Text, 512))
		}
	}
	return left, nil
}

// sendToAgent leaves a message on a child that has not finished, under
// the parent call's point (a retry writes the same key). The child takes
// it in where it is about to call its model in a stage that accepts
// messages: at once when its current stage does, else once it reaches
// one, a child that has not started yet included. So whether a message
// arrives never depends on how far the child had got when it was sent;
// the model is told when it waits. A finished child, one whose blueprint
// has no stage that accepts messages, and one sent the most messages are
// refused, with the reason, to the model.
func (cc *childCalls) sendToAgent(ctx context.Context, c *arv1.AgentRun, id, msg string) (string, bool, error) {
	bp, refusal, err := cc.refuseMessage(ctx, c, id)
	if err != nil || refusal != "" {
		return refusal, true, err
	}
	orig := c.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[messageAnnotationPrefix+id] = msg
	if err := cc.client.Patch(ctx, c, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Sub-agent %q is gone.", c.Name), true, nil
		}
		return "", false, fmt.Errorf("sending a message to sub-agent %s: %w", c.Name, err)
	}
	res := map[string]any{"name": c.Name, "sent": true}
	if note := messageWait(c, bp); note != "" {
		res["queued"], res["note"] = true, note
	} else {
		res["stage"] = c.Status.CurrentStage
	}
	b, _ := json.Marshal(res)
	return string(b), false, nil
}

// refuseMessage says why a child cannot be sent a message, or "", with
// the child's blueprint (nil when it cannot be read yet: the child itself
// will say why it does not start).
func (cc *childCalls) refuseMessage(ctx context.Context, c *arv1.AgentRun, id string) (*blueprint.Blueprint, string, error) {
	if c.Status.Phase.IsTerminal() {
		return nil, fmt.Sprintf("Sub-agent %q has finished (%s); it takes no more messages.", c.Name, c.Status.Phase), nil
	}
	bp, err := cc.childBlueprint(ctx, c)
	if err != nil {
		return nil, "", err
	}
	if _, sent := c.Annotations[messageAnnotationPrefix+id]; sent {
		return bp, "", nil // this very call, retried
	}
	if len(pendingMessages(c)) >= maxMessagesPerChild {
		return nil, fmt.Sprintf("Sub-agent %q has been sent %d messages, the most one sub-agent takes.", c.Name, maxMessagesPerChild), nil
	}
	if bp != nil && len(acceptingStages(bp)) == 0 {
		return nil, fmt.Sprintf("Sub-agent %q's blueprint has no stage that accepts messages (none sets accepts_messages = true), so it would never see one.", c.Name), nil
	}
	return bp, "", nil
}

// childBlueprint is the blueprint a child runs: its snapshot once it has
// one, else the blueprint it will start from (the snapshot its spec names,
// or the ConfigMap spec.agent names as it reads now). Nil when that cannot
// be read or does not parse.
func (cc *childCalls) childBlueprint(ctx context.Context, c *arv1.AgentRun) (*blueprint.Blueprint, error) {
	if name := cmp.Or(c.Status.BlueprintSnapshot, c.Spec.BlueprintSnapshot); name != "" {
		bp, perr, err := cc.blueprints.snapshot(ctx, c.Namespace, name)
		if perr != nil {
			return nil, nil
		}
		return bp, err
	}
	data, rv, found, err := cc.blueprints.refs.ConfigMap(ctx, c.Namespace, c.Spec.Agent)
	if err != nil || !found {
		return nil, err
	}
	if src := cc.blueprints.parseSource(c.Namespace, c.Spec.Agent, rv, data); src.err == nil {
		return src.bp, nil
	}
	return nil, nil
}

// acceptingStages names the blueprint's stages that accept messages.
func acceptingStages(bp *blueprint.Blueprint) []string {
	var out []string
	for i := range bp.Stages {
		if bp.Stages[i].AcceptsMessages {
			out = append(out, bp.Stages[i].Name)
		}
	}
	return out
}

// messageWait says why a message just left on a child waits, or "" when
// the child's current stage takes it in at its next model call.
func messageWait(c *arv1.AgentRun, bp *blueprint.Blueprint) string {
	where := "a stage that accepts messages"
	if bp != nil {
		where = fmt.Sprintf("a stage that accepts messages (%s)", strings.Join(acceptingStages(bp), ", "))
	}
	after := fmt.Sprintf("; the message waits, and it sees it once it is in %s. If it finishes first, its result lists the message as not taken in.", where)
	if c.Status.BlueprintSnapshot == "" || c.Status.CurrentStage == "" || bp == nil {
		return fmt.Sprintf("Sub-agent %q has not started yet", c.Name) + after
	}
	if st, _, ok := bp.Stage(c.Status.CurrentStage); !ok || !st.AcceptsMessages {
		return fmt.Sprintf("Sub-agent %q is in stage %q, which does not accept messages", c.Name, c.Status.CurrentStage) + after
	}
	return ""
}

// killAgent cancels a child through its spec.cancel, the way a person
// would; the child's own reconcile then cancels its children in turn.
func (cc *childCalls) killAgent(ctx context.Context, c *arv1.AgentRun) (string, error) {
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
		if err := cc.client.Patch(ctx, c, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("cancelling sub-agent %s: %w", c.Name, err)
		}
		res["cancelled"] = true
	}
	b, _ := json.Marshal(res)
	return string(b), nil
}

// deliverResults is the drain: before the model call Decide is about to
// make, it journals the results of the run's sub-agents that finished and
// were not delivered yet, one SubagentResultDelivered each in one write,
// each holding the exact user message the call shows. The journal is the
// record of what the model was sent, so a restart neither loses nor
// repeats one, and wait_for_agent on a drained sub-agent is told it was
// already delivered.
func (cc *childCalls) deliverResults(ctx context.Context, s *scope) error {
	es := make([]journal.Entry, 0, len(s.action.Deliver))
	for _, name := range s.action.Deliver {
		c, err := cc.childNamed(ctx, s.run, s.facts, name)
		if err != nil {
			return err
		}
		report := fmt.Sprintf(`{"name":%q,"success":false,"error":"the sub-agent is gone"}`, name)
		if c != nil {
			if report, err = cc.agentReport(ctx, c, true); err != nil {
				return err
			}
		}
		es = append(es, journal.Entry{Kind: journal.SubagentResultDelivered, Child: name, Text: drainedResult(name, report)})
	}
	return recordIn(ctx, cc.journals, s, es...)
}

// drainedResult is the user message that hands the model a finished
// sub-agent's result: plainly the operator's, naming the sub-agent, then
// the report wait_for_agent would have given.
func drainedResult(name, report string) string {
	return fmt.Sprintf("[agentrun: sub-agent %q finished. Its result, delivered once (wait_for_agent on it will not deliver it again):]\n%s", name, report)
}
