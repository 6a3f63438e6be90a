package runstate

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/builtin"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/output"
)

// AnswerSpec is an AgentRunAnswer's spec as the checks see it.
type AnswerSpec struct {
	Name, By, Point, Decision string
	Text, Input               *string
	// Reason is the person's reason for the decision ("" when none).
	Reason string
	// Args are replacement arguments for the call an Approve lets through,
	// as JSON text (nil: the model's arguments stand).
	Args *string
}

// Approve and Deny, as AnswerSpec.Decision spells them; Edit and Revise
// answer a checkpoint whose point offers edit_options or directives.
const (
	DecisionApprove = "Approve"
	DecisionDeny    = "Deny"
	DecisionEdit    = "Edit"
	DecisionRevise  = "Revise"
)

// AskedPoint is the point of the question the run asks now ("" when it
// asks none): the point of the wait Decide parks on when nobody has
// answered, paused or not. A point names one question (a checkpoint, the
// approval or the taint gate of one call, one dangling intent), so an
// answer can never carry over to the next question about the same call.
func AskedPoint(f Facts) string {
	f.Answer, f.Paused, f.Cancel = nil, false, false
	a := Decide(f)
	if a.Kind == ActAsk {
		return a.Ask
	}
	if a.Kind != ActPark {
		return ""
	}
	switch m := a.Markers; {
	case m.InteractionPoint != nil:
		return m.InteractionPoint.Point
	case m.Setup != nil || m.Budget != nil:
		return "" // those are fixed, not answered
	case m.Ask != nil:
		return m.Ask.Point
	}
	return ""
}

// CheckAnswer checks an answer against the question the run asks (asked,
// from AskedPoint), and returns it as Decide applies it. The error says why
// the answer does not fit (it is recorded on the answer as Rejected); the
// run keeps waiting. tool is what the controller found out about the head
// tool call (its input schema checks replacement arguments); nil when none.
func CheckAnswer(st *journal.State, asked string, tool *ToolFact, a AnswerSpec) (*Answer, error) {
	if asked == "" || a.Point != asked {
		what := "no question"
		if asked != "" {
			what = fmt.Sprintf("point %q", asked)
		}
		return nil, fmt.Errorf("the run waits on %s, not on point %q", what, a.Point)
	}
	ans := &Answer{Name: a.Name, By: a.By, Decision: a.Decision, Approved: a.Decision == DecisionApprove, Reason: a.Reason}
	// The blueprint's ask and a tool policy's RequireApproval are both a
	// person approving one call: same reasons, same edited arguments.
	approval := st.Interaction == nil && (asked == ApprovalPoint(st) || asked == PolicyApprovalPoint(st))
	if a.Args != nil && !approval {
		return nil, fmt.Errorf("args replace a tool call's arguments, so they answer a tool call's approval (ToolApproval) only")
	}
	if in := st.Interaction; in != nil {
		return checkpointAnswer(in.Point, ans, a)
	}
	if approval {
		return approvalAnswer(st.HeadCall(), tool, ans, a)
	}
	h := st.HeadCall()
	if in := h.Intent; in != nil {
		if err := needDecision(a, "a dangling write", DecisionDone, DecisionRetry, DecisionAbandon); err != nil {
			return nil, err
		}
		if a.Decision == DecisionDone {
			v, ok := value(a)
			if !ok {
				return nil, fmt.Errorf("decision Done needs the write's output as text or input")
			}
			ans.Input = v
		}
		return ans, nil
	}
	switch h.Name {
	case builtin.AskUser:
		var args AskArgs
		_ = json.Unmarshal([]byte(h.Arguments), &args)
		v, err := askValue(args, a)
		ans.Input = v
		return ans, err
	case builtin.WaitForSignal:
		var args SignalArgs
		_ = json.Unmarshal([]byte(h.Arguments), &args)
		v, ok := value(a)
		if !ok {
			return nil, fmt.Errorf("a signal needs text or input")
		}
		if err := checkSchema(args.InputSchema, v); err != nil {
			return nil, err
		}
		ans.Input = v
		return ans, nil
	case builtin.PresentForReview:
		switch {
		case a.Text != nil:
			ans.Input = *a.Text
		case a.Reason != "":
			ans.Input = a.Reason // the reviewer's reason is their feedback
		}
		return ans, needDecision(a, "a review", DecisionApprove, DecisionDeny)
	}
	if a.Text != nil {
		ans.Input = *a.Text // a denial's reason, told to the model
	}
	if a.Reason != "" {
		ans.Input = a.Reason
	}
	return ans, needDecision(a, "a tool call", DecisionApprove, DecisionDeny)
}

// ApprovalPoint is the point of the head tool call's approval
// (ToolApproval), "" when no call is due.
func ApprovalPoint(st *journal.State) string {
	if p := st.CallPoint(); p != "" {
		return p + approvalSuffix
	}
	return ""
}

const approvalSuffix = "-approval"

// PolicyApprovalPoint is the point of the head tool call's approval a tool
// policy's RequireApproval asks for, "" when no call is due.
func PolicyApprovalPoint(st *journal.State) string {
	if p := st.CallPoint(); p != "" {
		return p + PolicyPointSuffix
	}
	return ""
}

// approvalAnswer checks an answer to a tool call's approval: Approve or
// Deny, a reason where a policy requires one, and replacement arguments
// (an Approve only) that are a JSON object within arv1.MaxAnswerArgsBytes and satisfy
// the tool's input schema. The arguments are kept compact.
func approvalAnswer(h *journal.CallState, tool *ToolFact, ans *Answer, a AnswerSpec) (*Answer, error) {
	if err := needDecision(a, "a tool call", DecisionApprove, DecisionDeny); err != nil {
		return nil, err
	}
	switch {
	case a.Reason != "":
		ans.Input = a.Reason // told to the model on a denial
	case a.Text != nil:
		ans.Input = *a.Text // older answers gave a denial's reason as text
	}
	if h.ReasonRequired != "" && strings.TrimSpace(ans.Input) == "" {
		return nil, fmt.Errorf("a reason is required to approve or deny this call (%s): answer again with a reason", h.ReasonRequired)
	}
	if a.Args == nil {
		return ans, nil
	}
	if a.Decision != DecisionApprove {
		return nil, fmt.Errorf("args replace the arguments of a call you approve; a denied call is not made")
	}
	args, err := checkArgs(*a.Args, h.Name, tool)
	if err != nil {
		return nil, err
	}
	ans.Args = args
	return ans, nil
}

// checkArgs checks replacement arguments for the head call (of the tool
// named name) and returns them as compact JSON.
func checkArgs(raw, name string, tool *ToolFact) (string, error) {
	var obj map[string]any
	if err := json.Unmarshal([]byte(raw), &obj); err != nil || obj == nil {
		return "", fmt.Errorf("args must be a JSON object (a tool call's arguments)")
	}
	compact, _ := json.Marshal(obj)
	if len(compact) > arv1.MaxAnswerArgsBytes {
		return "", fmt.Errorf("args are %d bytes; at most %d", len(compact), arv1.MaxAnswerArgsBytes)
	}
	if tool == nil || !tool.Known {
		return "", fmt.Errorf("the tool's input schema is not known, so edited args cannot be checked; approve or deny the call as it is")
	}
	if s := tool.InputSchema; s != "" && s != "null" {
		if why := output.Check(output.Spec{Format: blueprint.OutputJSON, Schema: s, SchemaURL: toolInputSchemaURL(name)}, string(compact)); why != "" {
			why = strings.Replace(why, "the output schema", "the tool's input schema", 1)
			return "", fmt.Errorf("%s", strings.Replace(why, "the output", "args", 1))
		}
	}
	return string(compact), nil
}

// toolInputSchemaURL names a tool's input schema in the messages refusing
// edited arguments: a name of our own (the MCP server gives the schema
// none), with the tool's name in it.
func toolInputSchemaURL(tool string) string {
	return "https://agentrun.dev/schemas/tools/" + url.PathEscape(tool) + "/input.json"
}

func needDecision(a AnswerSpec, what string, allowed ...string) error {
	if !slices.Contains(allowed, a.Decision) {
		return fmt.Errorf("%s is answered with decision %s, not %q", what, strings.Join(allowed, ", "), a.Decision)
	}
	return nil
}

// value is the answer's input as JSON text: input as given (null counts),
// else text as a JSON string.
func value(a AnswerSpec) (string, bool) {
	switch {
	case a.Input != nil:
		return *a.Input, true
	case a.Text != nil:
		b, _ := json.Marshal(*a.Text)
		return string(b), true
	}
	return "", false
}

// askValue checks an answer to ask_user against its style, options and
// input_schema, and returns it as JSON text.
func askValue(q AskArgs, a AnswerSpec) (string, error) {
	v, ok := value(a)
	if !ok {
		return "", fmt.Errorf("a question is answered with text or input")
	}
	var doc any
	if err := json.Unmarshal([]byte(v), &doc); err != nil {
		return "", fmt.Errorf("input is not JSON: %v", err)
	}
	switch {
	case q.Style == StyleConfirm:
		switch s := doc.(type) {
		case bool:
		case string:
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "yes", "y", "true":
				v = "true"
			case "no", "n", "false":
				v = "false"
			default:
				return "", fmt.Errorf("a confirmation is answered yes or no, not %q", s)
			}
		default:
			return "", fmt.Errorf("a confirmation is answered yes or no, not %s", v)
		}
	case len(q.Options) > 0:
		s, isString := doc.(string)
		if !isString || !slices.Contains(q.Options, s) {
			return "", fmt.Errorf("the answer must be one of %s, not %s", joinQuoted(q.Options), v)
		}
	}
	return v, checkSchema(q.InputSchema, v)
}

func checkSchema(schema json.RawMessage, v string) error {
	if len(schema) == 0 || string(schema) == "null" {
		return nil
	}
	if why := output.Check(output.Spec{Format: blueprint.OutputJSON, Schema: string(schema)}, v); why != "" {
		return fmt.Errorf("%s", strings.Replace(why, "the output", "the answer", 1))
	}
	return nil
}

// checkpointAnswer checks an answer to a checkpoint: Approve or Deny, and,
// where the point offers them, Edit (text is the edited draft, which the
// next stage gets) and Revise (text is the instructions the stage is sent
// back with). An Approve must fit the point's style (styleAnswer).
func checkpointAnswer(p blueprint.InteractionPoint, ans *Answer, a AnswerSpec) (*Answer, error) {
	allowed := []string{DecisionApprove, DecisionDeny}
	if len(p.EditOptions) > 0 {
		allowed = append(allowed, DecisionEdit)
	}
	if len(p.Directives) > 0 {
		allowed = append(allowed, DecisionRevise)
	}
	if err := needDecision(a, "checkpoint "+strconv.Quote(p.Name), allowed...); err != nil {
		return nil, err
	}
	switch a.Decision {
	case DecisionApprove:
		return styleAnswer(p, ans, a)
	case DecisionEdit:
		if a.Text == nil {
			return nil, fmt.Errorf("an Edit answer needs the edited draft as text")
		}
		ans.Approved, ans.Edit = true, a.Text
	case DecisionRevise:
		if a.Text == nil || strings.TrimSpace(*a.Text) == "" {
			return nil, fmt.Errorf("a Revise answer needs the instructions as text")
		}
		ans.Approved, ans.Directive = true, *a.Text
	}
	return ans, nil
}

// styleAnswer checks an Approve against the point's style: a confirm point
// takes no text, a multiple_choice one one of its options, a free_text one
// some text. Text naming one of abort_options is an abort: it cancels the
// run, as a Deny does, whatever the style.
func styleAnswer(p blueprint.InteractionPoint, ans *Answer, a AnswerSpec) (*Answer, error) {
	label := "checkpoint " + strconv.Quote(p.Name)
	if a.Input != nil {
		return nil, fmt.Errorf("%s is answered with text, not input", label)
	}
	text := ""
	if a.Text != nil {
		text = *a.Text
	}
	if a.Text != nil && slices.Contains(p.AbortOptions, text) {
		ans.Approved, ans.Abort = false, text
		return ans, nil
	}
	switch p.Style {
	case blueprint.StyleMultipleChoice:
		if !slices.Contains(p.Options, text) {
			return nil, fmt.Errorf("%s is multiple_choice: answer Approve with one of %s as text, not %q", label, joinQuoted(p.Options), text)
		}
		ans.Choice = text
	case blueprint.StyleFreeText:
		if strings.TrimSpace(text) == "" {
			return nil, fmt.Errorf("%s is free_text: answer Approve with your answer as text", label)
		}
		ans.Choice = text
	default:
		if a.Text != nil {
			return nil, fmt.Errorf("%s is a confirmation: answer Approve or Deny without text%s", label, abortHint(p))
		}
	}
	return ans, nil
}

// abortHint names the abort options a confirmation also takes as text.
func abortHint(p blueprint.InteractionPoint) string {
	if len(p.AbortOptions) == 0 {
		return ""
	}
	return fmt.Sprintf(" (or with %s to abort the run)", joinQuoted(p.AbortOptions))
}
