package a2aserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// maxTask is the CRD's bound on spec.task.
const maxTask = 65536

// handler serves one JSON-RPC request for one agent, as the caller whose
// client c is. It implements a2asrv.RequestHandler.
type handler struct {
	s     *Server
	c     client.WithWatch
	user  string // the caller's username, as the API server knows them
	agent string
	ns    string
}

// served says whether the agent is served over A2A at all: its blueprint
// exists and exposes it. Every method checks it first.
func (h *handler) served(ctx context.Context) error {
	_, err := h.s.blueprintOf(ctx, h.c, h.agent)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("no agent %q in namespace %s: %w", h.agent, h.ns, a2a.ErrInvalidParams)
	case errors.Is(err, errNotExposed):
		return fmt.Errorf("agent %q: %v: %w", h.agent, err, a2a.ErrUnsupportedOperation)
	}
	return rpcError(err)
}

func (h *handler) getRun(ctx context.Context, id a2a.TaskID) (*arv1.AgentRun, error) {
	name, err := parseTaskID(id, h.ns)
	if err != nil {
		return nil, err
	}
	run := &arv1.AgentRun{}
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: name}, run); err != nil {
		return nil, rpcError(err)
	}
	if run.Spec.Agent != h.agent {
		return nil, fmt.Errorf("task %s runs agent %q, not %q: %w", id, run.Spec.Agent, h.agent, a2a.ErrTaskNotFound)
	}
	return run, nil
}

// output reads a completed run's final output as the caller ("" before).
func (h *handler) output(ctx context.Context, run *arv1.AgentRun) (string, error) {
	d := run.Status.FinalOutput
	if d == nil || d.ObjectName == "" {
		return "", nil
	}
	if st, _ := StateOf(run); st != a2a.TaskStateCompleted {
		return "", nil
	}
	var cm corev1.ConfigMap
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: d.ObjectName}, &cm); err != nil {
		return "", rpcError(err)
	}
	return cm.Data["output"], nil
}

func (h *handler) task(ctx context.Context, run *arv1.AgentRun) (*a2a.Task, error) {
	out, err := h.output(ctx, run)
	if err != nil {
		return nil, err
	}
	return TaskOf(run, out), nil
}

func (h *handler) OnGetTask(ctx context.Context, q *a2a.TaskQueryParams) (*a2a.Task, error) {
	run, err := h.getRun(ctx, q.ID)
	if err != nil {
		return nil, err
	}
	return h.task(ctx, run)
}

// OnCancelTask sets spec.cancel; the task reads canceled once the
// controller has stopped the run.
func (h *handler) OnCancelTask(ctx context.Context, p *a2a.TaskIDParams) (*a2a.Task, error) {
	run, err := h.getRun(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	if run.Status.Phase.IsTerminal() {
		return nil, fmt.Errorf("task %s is already %s: %w", p.ID, run.Status.Phase, a2a.ErrTaskNotCancelable)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"cancel":true}}`))
	if err := h.c.Patch(ctx, run, patch); err != nil {
		return nil, rpcError(err)
	}
	return h.task(ctx, run)
}

// OnSendMessage starts a run, or answers the wait of the task the message
// names. A blocking call (the default) returns once the task needs input
// or has ended; a non-blocking one at once.
func (h *handler) OnSendMessage(ctx context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	run, answered, err := h.accept(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.Config != nil && p.Config.Blocking != nil && !*p.Config.Blocking {
		return h.task(ctx, run)
	}
	var last *a2a.Task
	for ev, err := range h.follow(ctx, run, answered) {
		if err != nil {
			return nil, err
		}
		if t, ok := ev.(*a2a.Task); ok {
			last = t
		}
	}
	return last, nil
}

func (h *handler) OnSendMessageStream(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		run, answered, err := h.accept(ctx, p)
		if err != nil {
			yield(nil, err)
			return
		}
		h.stream(ctx, run, answered, yield)
	}
}

func (h *handler) OnResubscribeToTask(ctx context.Context, p *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		run, err := h.getRun(ctx, p.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		h.stream(ctx, run, "", yield)
	}
}

// stream yields the task, then a status update for every change of its
// state or question, the output artifact on completion, and ends with the
// final update.
func (h *handler) stream(ctx context.Context, run *arv1.AgentRun, answered string, yield func(a2a.Event, error) bool) {
	first := true
	for ev, err := range h.follow(ctx, run, answered) {
		if err != nil {
			yield(nil, err)
			return
		}
		t := ev.(*a2a.Task)
		if first {
			first = false
			if !yield(t, nil) {
				return
			}
			if interrupts(t.Status.State) {
				return
			}
			continue
		}
		final := interrupts(t.Status.State)
		if t.Status.State == a2a.TaskStateCompleted && len(t.Artifacts) > 0 {
			if !yield(&a2a.TaskArtifactUpdateEvent{TaskID: t.ID, ContextID: t.ContextID, Artifact: t.Artifacts[0], LastChunk: true}, nil) {
				return
			}
		}
		upd := &a2a.TaskStatusUpdateEvent{TaskID: t.ID, ContextID: t.ContextID, Status: t.Status, Final: final, Metadata: t.Metadata}
		if !yield(upd, nil) {
			return
		}
	}
}

// accept starts the run a message asks for, or answers the wait of the
// task it names; answered is the point answered ("" for a new run).
func (h *handler) accept(ctx context.Context, p *a2a.MessageSendParams) (*arv1.AgentRun, string, error) {
	if p == nil || p.Message == nil {
		return nil, "", fmt.Errorf("message is required: %w", a2a.ErrInvalidParams)
	}
	if p.Message.TaskID != "" {
		return h.answer(ctx, p.Message)
	}
	run, err := h.start(ctx, p.Message)
	return run, "", err
}

// start creates the run as the caller (serveRPC has checked that the
// agent's blueprint exposes it).
func (h *handler) start(ctx context.Context, m *a2a.Message) (*arv1.AgentRun, error) {
	text := textOf(m)
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("the message has no text to make the run's task of: %w", a2a.ErrInvalidParams)
	}
	if len(text) > maxTask {
		return nil, fmt.Errorf("the task is %d bytes; a run's task holds at most %d: %w", len(text), maxTask, a2a.ErrInvalidParams)
	}
	run := &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{GenerateName: h.agent + "-", Namespace: h.ns,
			Annotations: map[string]string{AnnotationMessageID: m.ID}},
		Spec: arv1.AgentRunSpec{Agent: h.agent, Task: text},
	}
	if m.ContextID != "" {
		run.Annotations[AnnotationContextID] = m.ContextID
	}
	if err := h.c.Create(ctx, run); err != nil {
		return nil, rpcError(err)
	}
	return run, nil
}

// textOf joins a message's text parts; data parts are added as JSON.
func textOf(m *a2a.Message) string {
	var parts []string
	for _, p := range m.Parts {
		switch v := p.(type) {
		case a2a.TextPart:
			parts = append(parts, v.Text)
		case *a2a.TextPart:
			parts = append(parts, v.Text)
		case a2a.DataPart:
			if b, err := json.Marshal(v.Data); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	return strings.Join(parts, "\n")
}

// Push notifications are not offered: callers stream instead.

func (h *handler) OnGetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnListTaskPushConfig(context.Context, *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnSetTaskPushConfig(context.Context, *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnDeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigParams) error {
	return a2a.ErrPushNotificationNotSupported
}

func (h *handler) OnGetExtendedAgentCard(context.Context) (*a2a.AgentCard, error) {
	return nil, a2a.ErrAuthenticatedExtendedCardNotConfigured
}
