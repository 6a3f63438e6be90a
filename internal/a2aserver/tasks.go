package a2aserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Annotations the endpoint puts on the runs it creates.
const (
	// AnnotationContextID is the A2A contextId the caller sent (or the
	// endpoint chose), echoed in every task of the run.
	AnnotationContextID = "agentrun.dev/a2a-context-id"
	// AnnotationMessageID is the A2A messageId that started the run.
	AnnotationMessageID = "agentrun.dev/a2a-message-id"
)

// outputArtifactName names the artifact holding the run's final output.
const outputArtifactName = "output"

// TaskID is the A2A task id of a run: "namespace/name".
func TaskID(run *arv1.AgentRun) a2a.TaskID {
	return a2a.TaskID(run.Namespace + "/" + run.Name)
}

// parseTaskID splits a task id into the run's name, refusing ids of
// another namespace than the one served.
func parseTaskID(id a2a.TaskID, namespace string) (string, error) {
	ns, name, ok := strings.Cut(string(id), "/")
	if !ok || ns == "" || name == "" {
		return "", fmt.Errorf("task id %q is not namespace/name: %w", id, a2a.ErrTaskNotFound)
	}
	if ns != namespace {
		return "", fmt.Errorf("task id %q is in namespace %q; this endpoint serves %q: %w", id, ns, namespace, a2a.ErrTaskNotFound)
	}
	return name, nil
}

func contextID(run *arv1.AgentRun) string {
	if c := run.Annotations[AnnotationContextID]; c != "" {
		return c
	}
	return string(TaskID(run))
}

// StateOf maps a run's status to an A2A task state and, where a person or
// the caller should read something, the agent's message: Queued and
// Starting are submitted; Running and the waits that clear by themselves
// are working; a wait needing a person is input-required with its
// question; Complete (also CompleteInteractive) is completed, Error
// failed, Cancelled canceled. Paused is working: nothing is asked of the
// caller, the run goes on when resumed.
func StateOf(run *arv1.AgentRun) (a2a.TaskState, string) {
	st := run.Status
	switch st.Phase {
	case "", arv1.PhaseQueued, arv1.PhaseStarting:
		return a2a.TaskStateSubmitted, ""
	case arv1.PhaseComplete, arv1.PhaseCompleteInteractive:
		return a2a.TaskStateCompleted, ""
	case arv1.PhaseError:
		return a2a.TaskStateFailed, st.Error
	case arv1.PhaseCancelled:
		return a2a.TaskStateCanceled, ""
	case arv1.PhaseWaitingInput:
		w := st.WaitingOn
		if w == nil || !w.NeedsAPerson {
			return a2a.TaskStateWorking, ""
		}
		return a2a.TaskStateInputRequired, waitMessage(w)
	}
	return a2a.TaskStateWorking, ""
}

// waitMessage is what an input-required task tells its caller: the
// question, or for a setup problem the remedy.
func waitMessage(w *arv1.WaitingOn) string {
	switch {
	case w.Reason == arv1.WaitNeedsSetup:
		return fmt.Sprintf("%s: %s", w.Blocker, w.Remedy)
	case w.Question != "":
		return w.Question
	case w.Summary != "":
		return w.Summary
	}
	return string(w.Reason)
}

// TaskOf renders a run as an A2A task; output is the run's final output,
// attached as an artifact once the run has completed ("" for none).
func TaskOf(run *arv1.AgentRun, output string) *a2a.Task {
	id := TaskID(run)
	task := &a2a.Task{ID: id, ContextID: contextID(run), Status: statusOf(run), Metadata: metadataOf(run)}
	if task.Status.State == a2a.TaskStateCompleted && run.Status.FinalOutput != nil {
		task.Artifacts = []*a2a.Artifact{outputArtifact(output)}
	}
	return task
}

func statusOf(run *arv1.AgentRun) a2a.TaskStatus {
	state, text := StateOf(run)
	s := a2a.TaskStatus{State: state}
	if t := run.Status.UpdatedAt; t != nil {
		ts := t.UTC().Truncate(time.Second)
		s.Timestamp = &ts
	}
	if text != "" {
		s.Message = &a2a.Message{ID: messageID(run, state, text), Role: a2a.MessageRoleAgent, TaskID: TaskID(run),
			ContextID: contextID(run), Parts: a2a.ContentParts{a2a.TextPart{Text: text}}}
	}
	return s
}

// messageID is stable for one wait, so a caller sees the same question
// under the same id however often it reads the task.
func messageID(run *arv1.AgentRun, state a2a.TaskState, text string) string {
	if w := run.Status.WaitingOn; w != nil && w.Point != "" {
		return fmt.Sprintf("%s-%s-%s", run.UID, state, w.Point)
	}
	return fmt.Sprintf("%s-%s-%d", run.UID, state, len(text))
}

func metadataOf(run *arv1.AgentRun) map[string]any {
	m := map[string]any{"phase": string(run.Status.Phase), "agent": run.Spec.Agent}
	if w := run.Status.WaitingOn; w != nil {
		m["waitingOn"] = string(w.Reason)
		if w.Point != "" {
			m["point"] = w.Point
		}
	}
	return m
}

func outputArtifact(output string) *a2a.Artifact {
	return &a2a.Artifact{ID: outputArtifactName, Name: outputArtifactName, Parts: a2a.ContentParts{a2a.TextPart{Text: output}}}
}
