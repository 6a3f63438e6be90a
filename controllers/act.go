package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/executor"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// maxToolArguments caps one tool call's arguments as journaled.
const maxToolArguments = 64 << 10

// maxOutputBytes is the seeds' cap on a stored final output.
const maxOutputBytes = output.MaxBytes

// actOutcome is what acting changed that status must show.
type actOutcome struct {
	// again: the action changed the facts (spawned, journaled an answer or
	// a cancellation); derive and decide once more in this reconcile.
	again bool
	// backpressure: a step is due but every executor slot is busy.
	backpressure bool
	// dispatchedModel is "provider/model" of a call just dispatched.
	dispatchedModel string
	requeueAfter    time.Duration
	finalOutput     *arv1.FinalOutputDescriptor
}

func (o actOutcome) result() ctrl.Result {
	return ctrl.Result{RequeueAfter: o.requeueAfter}
}

// act carries out the decision. Every write here is idempotent under a
// retried reconcile: objects have deterministic names and AlreadyExists
// means done.
func (r *AgentRunReconciler) act(ctx context.Context, run *arv1.AgentRun, f *facts, a runstate.Action) (actOutcome, error) {
	var out actOutcome
	if err := r.recordAnswers(ctx, f.answerUpdates); err != nil {
		return out, err
	}
	f.answerUpdates = nil
	if len(f.children) > 0 {
		if err := r.cascade(ctx, run, f.children, a.Kind == runstate.ActCancel || (a.FanOut != nil && a.FanOut.FailAll)); err != nil {
			return out, err
		}
	}
	if len(a.CreateChildren) > 0 {
		if err := r.createChildren(ctx, run, f, a.CreateChildren); err != nil {
			return out, err
		}
	}
	switch a.Kind {
	case runstate.ActToolDecide, runstate.ActToolComplete, runstate.ActToolRetry, runstate.ActAbandon, runstate.ActToolCall:
		return r.actTool(ctx, run, f, a)
	case runstate.ActResolveFanOut:
		return r.record(ctx, run, f, journal.Entry{Kind: journal.FanOutResolved, Stage: f.State.FanOut.Stage,
			FailedItems: a.FanOut.FailedItems, FailAll: a.FanOut.FailAll})
	case runstate.ActResolveChildren:
		return r.record(ctx, run, f, journal.Entry{Kind: journal.ChildrenResolved})
	case runstate.ActAsk:
		return r.record(ctx, run, f, journal.Entry{Kind: journal.QuestionAsked, Point: a.Ask})
	case runstate.ActWake:
		return r.record(ctx, run, f, journal.Entry{Kind: journal.SleepCompleted})
	case runstate.ActRefuseSpawn:
		return r.record(ctx, run, f, journal.Entry{Kind: journal.SpawnRefused, Message: a.Message})
	case runstate.ActSpawn:
		if err := r.snapshot(ctx, run, f); err != nil {
			return out, err
		}
		out.again = true
	case runstate.ActCancel:
		r.Pool.Cancel(run.UID)
		if r.Pool.RunInFlight(run.UID) {
			// Let the step stop, or record what it finished, first: its
			// completion and the cancellation must not race for one seq
			// (a lost write result would read as an unresolved write).
			out.requeueAfter = 100 * time.Millisecond
			return out, nil
		}
		return r.record(ctx, run, f, journal.Entry{Kind: journal.RunCancelled})
	case runstate.ActAnswerInteraction:
		in := f.State.Interaction
		e := journal.Entry{
			Kind: journal.InteractionAnswered, Stage: in.Stage, Point: in.Point.Name, Approved: true, Auto: true, By: "policy: spec.yolo",
		}
		if a := a.Answer; a != nil {
			e.Approved, e.Auto, e.By, e.Message, e.Expired = a.Approved, a.Expired, a.By, a.Name, a.Expired
		}
		return r.record(ctx, run, f, e)
	case runstate.ActPark:
		if a.RetryAt != nil {
			out.requeueAfter = a.RetryAt.Sub(f.Now)
		}
	case runstate.ActDispatch:
		return r.dispatch(ctx, run, f, a)
	}
	if f.State.Outcome == journal.OutcomeComplete && f.State.Output != nil && run.Status.FinalOutput == nil {
		d, err := r.storeOutput(ctx, run, f.State.Output, f.Blueprint)
		if err != nil {
			return out, err
		}
		out.finalOutput = d
	}
	return out, nil
}

// record journals e as the run's next entry, now; the facts changed, so the
// reconcile derives and decides again.
func (r *AgentRunReconciler) record(ctx context.Context, run *arv1.AgentRun, f *facts, e journal.Entry) (actOutcome, error) {
	e.Seq, e.At = f.State.NextSeq, f.Now
	return actOutcome{again: true}, r.journals.Append(ctx, run, e)
}

// snapshot copies the blueprint into an immutable ConfigMap the run owns, so
// later edits or deletion of the source cannot change the run in flight.
func (r *AgentRunReconciler) snapshot(ctx context.Context, run *arv1.AgentRun, f *facts) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: ownedName(run, "blueprint"), Namespace: run.Namespace,
			Labels: map[string]string{labelRunUID: string(run.UID), arv1.LabelComponent: componentSnapshot},
			Annotations: map[string]string{
				"agentrun.dev/source":         run.Spec.Agent,
				"agentrun.dev/blueprint-hash": blueprint.Hash(f.spawnFiles),
			},
			OwnerReferences: []metav1.OwnerReference{ownerRef(run)},
		},
		Immutable: ptr.To(true),
		Data:      f.spawnFiles,
	}
	if err := r.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("snapshotting the blueprint: %w", err)
	}
	// AlreadyExists: a previous attempt wrote it; the next derive reads that
	// copy (never the source again).
	if err := r.APIReader.Get(ctx, ctrlKey(cm), cm); err != nil {
		return err
	}
	bp, err := blueprint.Parse(cm.Data)
	if err == nil {
		err = withEntryStage(bp, run.Spec.EntryStage)
	}
	if err != nil {
		return fmt.Errorf("parsing the snapshot: %w", err)
	}
	r.blueprints.Put(run.UID, bp)
	return nil
}

// dispatch journals the call's intent (unless re-issuing one already
// journaled) and hands the call to the executor.
func (r *AgentRunReconciler) dispatch(ctx context.Context, run *arv1.AgentRun, f *facts, a runstate.Action) (actOutcome, error) {
	var out actOutcome
	res := f.resolved
	st := f.State
	stage, _, _ := f.Blueprint.Stage(st.Stage)
	intent := journal.Entry{
		Seq: st.NextSeq, Kind: journal.ModelCallRequested, At: f.Now,
		Stage: st.Stage, Iteration: st.Iteration, Provider: res.provider.Name, Model: res.model,
	}
	if a.Title {
		intent.Purpose = journal.PurposeTitle
	}
	if a.Reissue {
		intent = *st.Pending
	} else {
		intent.RequestHash = requestHash(run, &intent)
		if err := r.journals.Append(ctx, run, intent); err != nil {
			return out, err
		}
		f.State.Apply(f.Blueprint, intent)
	}
	if intent.Purpose == "" {
		out.dispatchedModel = res.provider.Name + "/" + res.model
	}
	req := providers.Request{
		RunUID: string(run.UID), Seq: intent.Seq, Stage: st.Stage, Iteration: st.Iteration,
		Attempt: st.FailedAttempts, Model: res.model, Task: run.Spec.Task, APIKey: res.apiKey,
	}
	if stage != nil {
		req.Script, req.SystemPrompt = stage.Script, stage.SystemPrompt
	}
	spec := outputSpec(run, f.Blueprint)
	req.OutputInstructions = spec.instructions
	if intent.Purpose == journal.PurposeTitle {
		// The titling call: the task alone, a short answer, no turns.
		req.Purpose, req.Script, req.SystemPrompt, req.OutputInstructions = journal.PurposeTitle, nil, "", ""
		req.Task = "Give this task a short title of at most eight words. Answer with the title only, no quotes.\n\nTask: " + run.Spec.Task
		r.submitCall(run, f, intent, req, res, spec.check, &out)
		return out, nil
	}
	for _, t := range st.Turns {
		turn := providers.Turn{Assistant: t.Text, Tools: t.Tools}
		if t.Rejected != "" {
			turn.Feedback = "Your output was refused: " + t.Rejected + ". Submit corrected output with the complete tool."
		}
		req.History = append(req.History, turn)
	}
	if _, scripted := r.Providers[res.provider.Type]; !scripted {
		// Only models choose tools; a scripted stage's calls are in its script.
		req.Tools = r.offeredTools(ctx, run, f.Blueprint, stage)
	}
	if lf := st.LastFanOut; lf != nil && lf.Target == st.Stage {
		outputs, err := r.mergeInputs(ctx, run, f.children)
		if err != nil {
			return out, err
		}
		req.ChildOutputs = outputs
	}
	r.submitCall(run, f, intent, req, res, spec.check, &out)
	return out, nil
}

// submitCall hands the call to the executor; a full pool is backpressure.
func (r *AgentRunReconciler) submitCall(run *arv1.AgentRun, f *facts, intent journal.Entry, req providers.Request, res *resolved, check output.Spec, out *actOutcome) {
	key := executor.Key{Run: run.UID, Seq: intent.Seq}
	wake := event.GenericEvent{Object: &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace}}}
	target := run.DeepCopy()
	agent := f.Blueprint.Agent.Name
	if !r.Pool.Submit(key, wake, func(stepCtx context.Context) { r.runModelCall(stepCtx, target, agent, intent, req, res, check) }) {
		out.backpressure = true
	}
}

// runModelCall runs on an executor worker: it calls the provider, retrying
// transient failures with capped exponential backoff and jitter, and
// journals the completion or the final classified failure. A cancelled
// step (run cancelled, manager stopping) journals nothing: the intent stays
// pending and is re-issued by whoever drives the run next.
func (r *AgentRunReconciler) runModelCall(ctx context.Context, run *arv1.AgentRun, agent string, intent journal.Entry, req providers.Request, res *resolved, check output.Spec) {
	started := time.Now()
	log := ctrl.Log.WithName("step").WithValues("AgentRun", run.Namespace+"/"+run.Name, "seq", intent.Seq)
	p, ok := r.providerFor(res.provider)
	var result providers.Result
	var callErr error
	if !ok {
		callErr = &providers.Error{Class: journal.FailFatal, Message: fmt.Sprintf("provider type %q is not supported by this operator version", res.provider.Type)}
	}
	timeout := r.stepTimeout
	if res.provider.TimeoutSeconds > 0 {
		timeout = time.Duration(res.provider.TimeoutSeconds) * time.Second
	}
	for attempt := 0; ok && attempt < 3; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		result, callErr = p.Call(callCtx, req)
		cancel()
		if callErr == nil || ctx.Err() != nil {
			break
		}
		pe := providers.AsError(callErr)
		if _, retryable := providers.ClassifyStatus(pe.Status); !retryable || pe.Status == 0 {
			break
		}
		backoff := min(500*time.Millisecond<<attempt, 30*time.Second)
		backoff += time.Duration(rand.Int64N(int64(backoff / 2)))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
	if ctx.Err() != nil {
		log.V(1).Info("Step cancelled before completion; its intent stays pending")
		return
	}
	done := journal.Entry{Seq: intent.Seq + 1, Call: intent.Seq, At: r.Clock.Now(), Provider: intent.Provider, Model: intent.Model, Stage: intent.Stage}
	key := breakerKey(run.Namespace, res.provider.Name)
	if callErr != nil {
		pe := providers.AsError(callErr)
		if pe.Class != journal.FailFatal {
			r.Breakers.Failure(key, string(pe.Class), r.Clock.Now())
		}
		done.Kind = journal.ModelCallFailed
		done.Failure = &journal.Failure{
			Class: pe.Class, Status: pe.Status, SecretVersion: res.secretVersion,
			Message: providers.Redact(pe.Message, req.APIKey.Reveal()),
		}
	} else {
		r.Breakers.Success(key)
		done.Kind = journal.ModelCallCompleted
		if o := result.Response.Output; o != "" {
			if why := output.Check(check, o); why != "" {
				result.Response.Output, result.Response.Complete, result.Response.OutputRejected = "", false, why
			}
		}
		for i, c := range result.Response.Calls {
			if len(c.Arguments) > maxToolArguments {
				// A journal entry is one ConfigMap (1 MiB); the call is kept,
				// its arguments replaced by a note the tool will refuse.
				result.Response.Calls[i].Arguments = fmt.Sprintf(`{"_dropped":"the arguments were %d bytes, over the %d-byte limit"}`, len(c.Arguments), maxToolArguments)
			}
		}
		done.Response = &result.Response
		done.Usage = &result.Usage
		switch {
		case result.CostNanoUSD != nil:
			done.CostNanoUSD, done.CostExact = result.CostNanoUSD, true
		default:
			u := result.Usage
			if c, priced := res.provider.Price(res.model, providerconfig.Usage{Prompt: u.Prompt, Completion: u.Completion, Cached: u.Cached, CacheWrite: u.CacheWrite}); priced {
				done.CostNanoUSD = ptr.To(int64(c))
			}
		}
	}
	outcome := "ok"
	if done.Failure != nil {
		outcome = string(done.Failure.Class)
	}
	u := journal.Usage{}
	if done.Usage != nil {
		u = *done.Usage
	}
	metrics.RecordCall(run.Namespace, agent, res.provider.Name, outcome, time.Since(started), u.Prompt, u.Completion, u.Cached, u.CacheWrite, done.CostNanoUSD)
	// A manager that dies here leaves the intent pending and the call is
	// issued again once.
	if err := r.appendCompletion(ctx, run, done); err != nil {
		log.Error(err, "Journaling the step's completion failed; the call will be re-issued")
	}
}

// appendCompletion journals a call's completion, retrying a few times so an
// API server blip does not cost the result. A nil error also covers a
// cancelled step (the intent stays pending by design).
func (r *AgentRunReconciler) appendCompletion(ctx context.Context, run *arv1.AgentRun, done journal.Entry) error {
	var err error
	for i := range 5 {
		if err = r.journals.Append(ctx, run, done); err == nil || ctx.Err() != nil {
			return nil
		}
		time.Sleep(time.Duration(200*(i+1)) * time.Millisecond)
	}
	return err
}

// storeOutput writes the final output into a ConfigMap the run owns,
// capped at 256 KiB, and returns its descriptor.
func (r *AgentRunReconciler) storeOutput(ctx context.Context, run *arv1.AgentRun, o *journal.SubmittedOutput, bp *blueprint.Blueprint) (*arv1.FinalOutputDescriptor, error) {
	text, truncated := o.Text, false
	if len(text) > maxOutputBytes {
		text, truncated = strings.ToValidUTF8(text[:maxOutputBytes], ""), true
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: ownedName(run, "output"), Namespace: run.Namespace,
			Labels:          map[string]string{labelRunUID: string(run.UID), arv1.LabelComponent: componentOutput},
			OwnerReferences: []metav1.OwnerReference{ownerRef(run)},
		},
		Immutable: ptr.To(true),
		Data:      map[string]string{"output": text},
	}
	if err := r.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("storing the final output: %w", err)
	}
	d := &arv1.FinalOutputDescriptor{
		Stage: o.Stage, SubmittedAt: ptrTime(r.Clock.Now()), Bytes: int64(len(o.Text)),
		Truncated: truncated, ObjectName: cm.Name,
	}
	format := run.Spec.Output
	switch {
	case format != nil && format.Format != "":
		d.Format = format.Format
	case bp.Agent.Output != nil && bp.Agent.Output.Format != "":
		d.Format = arv1.OutputFormat(bp.Agent.Output.Format)
	}
	return d, nil
}

// runOutputSpec is the output a run must hand back: the spec's override,
// else the blueprint's.
type runOutputSpec struct {
	check        output.Spec
	instructions string
}

func outputSpec(run *arv1.AgentRun, bp *blueprint.Blueprint) runOutputSpec {
	if o := run.Spec.Output; o != nil {
		return runOutputSpec{check: output.Spec{Format: string(o.Format), Schema: o.Schema}, instructions: o.Instructions}
	}
	if o := bp.Agent.Output; o != nil {
		return runOutputSpec{check: output.Spec{Format: o.Format, Schema: o.Schema}, instructions: o.Instructions}
	}
	return runOutputSpec{}
}

// requestHash identifies a model request by run, position and model.
func requestHash(run *arv1.AgentRun, e *journal.Entry) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%s|%d|%s/%s", run.UID, e.Seq, e.Stage, e.Iteration, e.Provider, e.Model))
	return hex.EncodeToString(h[:16])
}

// sharedHTTP pools connections across calls to HTTP providers; each call is
// bounded by its step's context instead of a client timeout.
var sharedHTTP = &http.Client{}

// providerFor returns the client for a provider entry: the registered one
// for its type (scripted, or a test's), else an SDK client for its base URL.
func (r *AgentRunReconciler) providerFor(p *providerconfig.Provider) (providers.Provider, bool) {
	if c, ok := r.Providers[p.Type]; ok {
		return c, true
	}
	switch p.Type {
	case providerconfig.TypeOpenAI:
		return providers.NewOpenAI(p.BaseURL, sharedHTTP), true
	case providerconfig.TypeAnthropic:
		return providers.NewAnthropic(p.BaseURL, sharedHTTP), true
	}
	return nil, false
}
