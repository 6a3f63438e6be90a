package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// Answer-waiting defaults: the controller takes an answer within a
// reconcile, so 30s without a verdict means it is not running.
const (
	answerPollEvery = 250 * time.Millisecond
	answerWaitFor   = 30 * time.Second
)

// errRejected ends a command whose answer the run rejected: the verdict is
// already printed, so only the exit code is left to give.
var errRejected = errors.New("the answer was rejected")

// Families of waits, named by the command that answers them.
const (
	familyDecide  = "approve" // approve or deny
	familyAnswer  = "answer"
	familyResolve = "resolve"
)

// reply is the answer a command creates, known from its arguments alone so
// that mistakes are caught before the run is read.
type reply struct {
	family   string // which waits it answers
	verb     string // what the confirmation line says was done
	decision arv1.AnswerDecision
	text     *string
	input    *string
	reason   string
	// args are a tool call's edited arguments (approve --args), compact
	// JSON; argsStdin says they are still to be read from stdin.
	args      []byte
	argsStdin bool
}

// checkpointOnly: the reply is one only a checkpoint takes (a choice, an
// edit, a revision), never a tool call's or review's approval.
func (r reply) checkpointOnly() bool {
	return r.decision == arv1.DecisionEdit || r.decision == arv1.DecisionRevise || (r.decision == arv1.DecisionApprove && r.text != nil)
}

// replyParsers turn each answer command's options into a reply, or a usage
// error.
var replyParsers = map[string]func(o options) (reply, error){
	"approve": parseApprove,
	"deny": func(o options) (reply, error) {
		r := reply{family: familyDecide, verb: "deny", decision: arv1.DecisionDeny}
		if err := oneName("deny", o); err != nil {
			return r, err
		}
		return withReason(r, o)
	},
	"answer":  parseAnswer,
	"resolve": parseResolve,
}

func oneName(cmd string, o options) error {
	if len(o.args) != 1 {
		return usagef("%s takes exactly one run NAME", cmd)
	}
	return nil
}

// parseApprove reads NAME, an optional --reason and, for a tool call,
// optional edited arguments (--args): a JSON object given inline, a file
// holding one, or "-" for stdin (read when the command runs).
func parseApprove(o options) (reply, error) {
	r := reply{family: familyDecide, verb: "approve", decision: arv1.DecisionApprove}
	if err := oneName("approve", o); err != nil {
		return r, err
	}
	r, err := withReason(r, o)
	if err != nil || o.callArgs == nil {
		return r, err
	}
	v := *o.callArgs
	switch t := strings.TrimSpace(v); {
	case t == "-":
		r.argsStdin = true
		return r, nil
	case strings.HasPrefix(t, "{") || strings.HasPrefix(t, "["): // JSON, not a path
		r.args, err = argsObject("--args", []byte(v))
	case t == "":
		return r, usagef("--args needs a JSON object, a FILE holding one, or - for stdin")
	default:
		b, rerr := os.ReadFile(v)
		if rerr != nil {
			return r, usagef("--args: %v (give a JSON object, a FILE holding one, or - for stdin)", rerr)
		}
		r.args, err = argsObject("--args "+v, b)
	}
	return r, err
}

// withReason adds --reason, which must say something.
func withReason(r reply, o options) (reply, error) {
	if o.reason == nil {
		return r, nil
	}
	if strings.TrimSpace(*o.reason) == "" {
		return r, usagef("--reason needs the reason's text")
	}
	if n := len(*o.reason); n > maxAnswerReason {
		return r, usagef("the reason is %d bytes; an answer holds at most %d (spec.reason)", n, maxAnswerReason)
	}
	r.reason = *o.reason
	return r, nil
}

// maxAnswerReason is the CRD's bound on spec.reason.
const maxAnswerReason = 4096

// argsObject checks that b is a JSON object within the run's bound on
// edited arguments, and returns it compact.
func argsObject(from string, b []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, usagef("%s: the arguments are not valid JSON (%v); give the call's arguments as a JSON object", from, err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, usagef("%s: the arguments are not a JSON object; give the call's arguments as one", from)
	}
	compact, _ := json.Marshal(obj)
	if len(compact) > arv1.MaxAnswerArgsBytes {
		return nil, usagef("%s: the arguments are %d bytes; a run takes at most %d", from, len(compact), arv1.MaxAnswerArgsBytes)
	}
	return compact, nil
}

// parseAnswer reads NAME and exactly one of TEXT, --json or --null; or,
// for a checkpoint, one of --choice, --edit, --edit-file and --revise.
func parseAnswer(o options) (reply, error) {
	if o.edit != nil || o.editFile != nil || o.revise != nil || o.choice != nil {
		return parseCheckpointAnswer(o)
	}
	r := reply{family: familyAnswer, verb: "answer"}
	if len(o.args) == 0 || len(o.args) > 2 {
		return r, usagef("answer takes a run NAME and one answer (quote a TEXT with spaces)")
	}
	given := 0
	if len(o.args) == 2 {
		given++
		r.text = &o.args[1]
	}
	if o.json != nil {
		given++
		if err := checkJSON("--json", *o.json); err != nil {
			return r, err
		}
		r.input = o.json
	}
	if o.null {
		given++
		null := "null"
		r.input = &null
	}
	if given != 1 {
		return r, usagef("answer needs exactly one of TEXT, --json JSON or --null (got %d)", given)
	}
	return r, nil
}

// parseCheckpointAnswer reads the answers a checkpoint takes besides a
// plain approve and deny: the option chosen at a multiple_choice point or
// the text of a free_text one (--choice, an Approve with that text), an
// edit of the draft it shows (--edit TEXT or --edit-file PATH; the point
// must offer edit_options) or instructions sending its stage back
// (--revise TEXT; the point must offer directives).
func parseCheckpointAnswer(o options) (reply, error) {
	r := reply{family: familyDecide}
	if err := oneName("answer --choice/--edit/--edit-file/--revise", o); err != nil {
		return r, err
	}
	if o.json != nil || o.null || countGiven(o.choice, o.edit, o.editFile, o.revise) != 1 {
		return r, usagef("give one of --choice TEXT, --edit TEXT, --edit-file PATH or --revise TEXT, and no other answer")
	}
	switch {
	case o.choice != nil:
		if strings.TrimSpace(*o.choice) == "" {
			return r, usagef("--choice needs the option (or, at a free_text point, the answer)")
		}
		r.verb, r.decision, r.text = "choose", arv1.DecisionApprove, o.choice
	case o.revise != nil:
		if strings.TrimSpace(*o.revise) == "" {
			return r, usagef("--revise needs the instructions the stage is sent back with")
		}
		r.verb, r.decision, r.text = "revise", arv1.DecisionRevise, o.revise
	case o.editFile != nil:
		b, err := os.ReadFile(*o.editFile)
		if err != nil {
			return r, usagef("--edit-file: %v", err)
		}
		text := string(b)
		r.verb, r.decision, r.text = "edit", arv1.DecisionEdit, &text
	default:
		r.verb, r.decision, r.text = "edit", arv1.DecisionEdit, o.edit
	}
	if n := len(*r.text); n > maxAnswerText {
		return r, usagef("the %s is %d bytes; an answer holds at most %d (spec.text)", r.verb, n, maxAnswerText)
	}
	return r, nil
}

// maxAnswerText is the CRD's bound on an answer's spec.text.
const maxAnswerText = 16384

func countGiven(ps ...*string) int {
	n := 0
	for _, p := range ps {
		if p != nil {
			n++
		}
	}
	return n
}

// parseResolve reads NAME and one of --done (with the write's output),
// --retry or --abandon.
func parseResolve(o options) (reply, error) {
	r := reply{family: familyResolve}
	if err := oneName("resolve", o); err != nil {
		return r, err
	}
	switch {
	case o.done && !o.retry && !o.abandon:
		r.verb, r.decision = "done", arv1.DecisionDone
	case o.retry && !o.done && !o.abandon:
		r.verb, r.decision = "retry", arv1.DecisionRetry
	case o.abandon && !o.done && !o.retry:
		r.verb, r.decision = "abandon", arv1.DecisionAbandon
	default:
		return r, usagef("resolve needs exactly one of --done, --retry or --abandon")
	}
	given := o.writeOutput != nil || o.writeJSON != nil
	switch {
	case given && !o.done:
		return r, usagef("--output and --output-json give the write's output, so they go with --done only")
	case o.writeOutput != nil && o.writeJSON != nil:
		return r, usagef("give the output once: --output TEXT or --output-json JSON")
	case o.done && !given:
		// The run takes the output as the call's result, and rejects a
		// Done without one.
		return r, usagef(`--done needs the write's output: --output TEXT or --output-json JSON (--output "" if it had none)`)
	}
	if o.writeJSON != nil {
		if err := checkJSON("--output-json", *o.writeJSON); err != nil {
			return r, err
		}
	}
	r.text, r.input = o.writeOutput, o.writeJSON
	return r, nil
}

// checkJSON refuses JSON that does not parse, before anything is created;
// the controller would only reject the answer later.
func checkJSON(flag, s string) error {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return usagef("%s %q is not valid JSON (%v); give plain text without the flag", flag, s, err)
	}
	return nil
}

// isReview tells a present_for_review wait from an ask_user one: the
// controller summarises it "UserPrompt: review" (older statuses only started
// the question with "Review:").
func isReview(w *arv1.WaitingOn) bool {
	if w.Summary != "" && w.Summary != string(arv1.WaitUserPrompt) {
		return w.Summary == string(arv1.WaitUserPrompt)+": review"
	}
	return strings.HasPrefix(w.Question, "Review:")
}

// familyOf is which command family answers w, or "" when no answer clears
// it (it clears by itself, or the cluster must change).
func familyOf(w *arv1.WaitingOn) string {
	switch w.Reason {
	case arv1.WaitInteractionPoint, arv1.WaitToolApproval, arv1.WaitTaintGate:
		return familyDecide
	case arv1.WaitUserPrompt:
		if isReview(w) {
			return familyDecide
		}
		return familyAnswer
	case arv1.WaitSignal:
		return familyAnswer
	case arv1.WaitNeedsReconciliation:
		return familyResolve
	}
	return ""
}

// waitText names a wait for a person, in refusals.
func waitText(w *arv1.WaitingOn) string {
	switch w.Reason {
	case arv1.WaitInteractionPoint:
		return fmt.Sprintf("checkpoint %q (InteractionPoint)", w.Point)
	case arv1.WaitToolApproval:
		return "a tool call to approve (ToolApproval)"
	case arv1.WaitTaintGate:
		return "a write after tainted input (TaintGate)"
	case arv1.WaitUserPrompt:
		if isReview(w) {
			return "a review (UserPrompt)"
		}
		return "a question (UserPrompt)"
	case arv1.WaitSignal:
		return fmt.Sprintf("a signal (Signal: %s)", transcript.OneLine(w.Signal, 80))
	case arv1.WaitNeedsReconciliation:
		return "a dangling write (NeedsReconciliation: " + writeText(w) + ")"
	}
	if w.Summary != "" {
		return w.Summary
	}
	return string(w.Reason)
}

func writeText(w *arv1.WaitingOn) string {
	if w.Seq == nil {
		return w.Tool
	}
	return fmt.Sprintf("%s #%d", w.Tool, *w.Seq)
}

// takesChoice: the wait is a multiple_choice or free_text checkpoint, as
// its question says (the run state writes the style there), so a plain
// approve would be rejected and --choice is the answer.
func takesChoice(w *arv1.WaitingOn) bool {
	return w.Reason == arv1.WaitInteractionPoint &&
		(strings.Contains(w.Question, "[multiple_choice: ") || strings.Contains(w.Question, "[free_text: ") ||
			strings.Contains(w.Question, "; multiple_choice: ") || strings.Contains(w.Question, "; free_text: "))
}

// answerCommands are the exact commands that answer what run waits on, for
// describe and for refusals; none when no answer clears the wait.
func answerCommands(run *arv1.AgentRun) []string {
	w := run.Status.WaitingOn
	if w == nil || w.Point == "" {
		return nil
	}
	cmd := func(verb, args string) string {
		return "kubectl agentrun " + verb + " " + run.Name + args + " -n " + run.Namespace
	}
	switch familyOf(w) {
	case familyDecide:
		if takesChoice(w) {
			return []string{cmd("answer", ` --choice "..."`), cmd("deny", "")}
		}
		if w.Reason == arv1.WaitUserPrompt {
			return []string{cmd("approve", ""), cmd("deny", ` --reason "..."`)}
		}
		return []string{cmd("approve", ""), cmd("deny", "")}
	case familyAnswer:
		return []string{cmd("answer", ` "..."`), cmd("answer", ` --json '...'`)}
	case familyResolve:
		return []string{cmd("resolve", ` --done --output "..."`), cmd("resolve", " --retry"), cmd("resolve", " --abandon")}
	}
	return nil
}

// fit checks that r answers what run waits on, and returns the wait. The
// controller checks again; this catches the usual mistakes before anything
// is created, and names the command that fits.
func fit(cmd string, r reply, run *arv1.AgentRun) (*arv1.WaitingOn, error) {
	w := run.Status.WaitingOn
	if w == nil {
		phase := string(run.Status.Phase)
		if phase == "" {
			phase = "not started"
		}
		return nil, fmt.Errorf("agentrun %q is not waiting on anything to answer (phase %s)", run.Name, phase)
	}
	family := familyOf(w)
	switch {
	case family == "":
		return nil, fmt.Errorf("agentrun %q waits on %s, which no answer clears: %s", run.Name, waitText(w), clearHint(w))
	case w.Point == "":
		return nil, fmt.Errorf("agentrun %q waits on %s but names no point to answer (status.waitingOn.point is empty)", run.Name, waitText(w))
	case (r.args != nil || r.argsStdin) && w.Reason != arv1.WaitToolApproval:
		return nil, fmt.Errorf("agentrun %q waits on %s; --args edit a tool call's arguments, so they answer a tool call to approve (ToolApproval) only", run.Name, waitText(w))
	case r.checkpointOnly() && w.Reason != arv1.WaitInteractionPoint:
		return nil, fmt.Errorf("agentrun %q waits on %s; --choice, --edit, --edit-file and --revise answer a checkpoint (InteractionPoint) only", run.Name, waitText(w))
	case family != r.family:
		return nil, fmt.Errorf("agentrun %q waits on %s, which %s does not answer; use %s", run.Name, waitText(w), cmd,
			strings.Join(answerCommands(run), " or "))
	}
	return w, nil
}

// clearHint says what clears a wait that no answer clears.
func clearHint(w *arv1.WaitingOn) string {
	switch w.Reason {
	case arv1.WaitNeedsSetup:
		return w.Remedy
	case arv1.WaitBudgetExceeded:
		return "raise spec.budgets"
	}
	return "it clears by itself"
}

// answerCmd creates the answer a command's reply describes, for the point
// the run waits on, in the name of the user the kubeconfig authenticates
// (asked of the API server, never typed in: admission refuses any other).
func answerCmd(cmd string) func(a *app, ctx context.Context, c client.Client, ns string, o options) error {
	return func(a *app, ctx context.Context, c client.Client, ns string, o options) error {
		r, err := replyParsers[cmd](o)
		if err != nil {
			return err
		}
		run, err := getRun(ctx, c, ns, o.args[0])
		if err != nil {
			return err
		}
		w, err := fit(cmd, r, run)
		if err != nil {
			return err
		}
		if r.argsStdin {
			b, err := io.ReadAll(io.LimitReader(a.stdin, 4*arv1.MaxAnswerArgsBytes))
			if err != nil {
				return fmt.Errorf("reading --args from stdin: %w", err)
			}
			if r.args, err = argsObject("--args -", b); err != nil {
				return err
			}
		}
		review := &authenticationv1.SelfSubjectReview{}
		if err := c.Create(ctx, review); err != nil {
			return fmt.Errorf("asking the API server who you are: %w", err)
		}
		ans := newAnswer(run, w, r, review.Status.UserInfo.Username)
		if r.args != nil {
			r.verb = "approve with edited args"
		}
		if err := c.Create(ctx, ans); err != nil {
			return err
		}
		of := run.Name
		if w.Reason == arv1.WaitNeedsReconciliation {
			of += " (write " + writeText(w) + ")"
		}
		fmt.Fprintf(a.stdout, "agentrunanswer.%s/%s created: %s %q of %s as %s\n", arv1.GroupVersion.Group, ans.Name, r.verb, w.Point, of, ans.Spec.By)
		if o.wait {
			return a.await(ctx, c, ans)
		}
		return nil
	}
}

// newAnswer is the AgentRunAnswer that r makes to the point run waits on
// (w), in by's name.
func newAnswer(run *arv1.AgentRun, w *arv1.WaitingOn, r reply, by string) *arv1.AgentRunAnswer {
	ans := &arv1.AgentRunAnswer{
		ObjectMeta: metav1.ObjectMeta{GenerateName: run.Name + "-", Namespace: run.Namespace},
		Spec: arv1.AgentRunAnswerSpec{Run: run.Name, Point: w.Point, Decision: r.decision, Text: r.text, Input: r.input,
			Reason: r.reason, By: by},
	}
	if r.args != nil {
		ans.Spec.Args = &runtime.RawExtension{Raw: r.args}
	}
	return ans
}

// await polls the answer until the controller records what became of it,
// and prints that: Applied, or Rejected with the reason (errRejected). An
// approval with edited arguments is followed on to what became of the
// call (awaitEdit): the policies may deny it once it is Applied.
func (a *app) await(ctx context.Context, c client.Client, ans *arv1.AgentRunAnswer) error {
	deadline := time.Now().Add(a.waitFor)
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ans), ans); err != nil {
			return err
		}
		switch ans.Status.State {
		case arv1.AnswerApplied:
			if ans.Spec.Args != nil {
				return a.awaitEdit(ctx, c, ans, deadline)
			}
			fmt.Fprintln(a.stdout, "Applied")
			return nil
		case arv1.AnswerRejected:
			fmt.Fprintf(a.stdout, "Rejected: %s\n", ans.Status.Message)
			return errRejected
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("agentrunanswer %s has no verdict after %s: is the agentrun controller running? (kubectl get ara %s -n %s)",
				ans.Name, a.waitFor, ans.Name, ans.Namespace)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(a.pollEvery):
		}
	}
}
