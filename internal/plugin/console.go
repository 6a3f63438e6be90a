package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// What the web console (internal/console) shares with the commands, so a
// page and a terminal say and do the same: the answer a person gives, the
// cost text and the console command itself.

// AnswerRequest is an answer as a command takes it: Command is approve,
// deny, answer or resolve, and the other fields are that command's flags
// (nil: not given).
type AnswerRequest struct {
	Command string
	Text    *string // answer's TEXT
	Reason  *string // approve or deny --reason
	// Args is approve --args: a tool call's edited arguments, a JSON
	// object only (never a FILE or stdin, which the command also takes:
	// a page must not name files on the console's machine).
	Args       *string
	JSON       *string // answer --json
	Null       bool    // answer --null
	Choice     *string // answer --choice
	Edit       *string // answer --edit
	Revise     *string // answer --revise
	Done       bool    // resolve --done
	Retry      bool    // resolve --retry
	Abandon    bool    // resolve --abandon
	Output     *string // resolve --output
	OutputJSON *string // resolve --output-json
}

// ErrBadAnswer marks an answer that does not fit what the run waits on, or
// is malformed: the person must change it (HTTP 400/409, exit 2 or 1).
var ErrBadAnswer = errors.New("bad answer")

// BuildAnswer checks req exactly as the answer commands check their
// arguments, and against what run waits on now, and returns the
// AgentRunAnswer to create in by's name (by is who the API server says the
// caller is: admission refuses any other name).
func BuildAnswer(req AnswerRequest, run *arv1.AgentRun, by string) (*arv1.AgentRunAnswer, error) {
	parse, ok := replyParsers[req.Command]
	if !ok {
		return nil, fmt.Errorf("%w: no answer command %q (approve, deny, answer or resolve)", ErrBadAnswer, req.Command)
	}
	o := options{args: []string{run.Name}, reason: req.Reason, json: req.JSON, null: req.Null, choice: req.Choice,
		edit: req.Edit, revise: req.Revise, done: req.Done, retry: req.Retry, abandon: req.Abandon,
		writeOutput: req.Output, writeJSON: req.OutputJSON}
	if req.Text != nil {
		o.args = append(o.args, *req.Text)
	}
	if req.Args != nil {
		if !strings.HasPrefix(strings.TrimSpace(*req.Args), "{") {
			return nil, fmt.Errorf("%w: the edited arguments must be a JSON object", ErrBadAnswer)
		}
		o.callArgs = req.Args
	}
	r, err := parse(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	w, err := fit(req.Command, r, run)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	return newAnswer(run, w, r, by), nil
}

// AnswerCommand is the command that answers w (approve, answer or
// resolve; approve also stands for deny), "" when no answer clears it.
func AnswerCommand(w *arv1.WaitingOn) string { return familyOf(w) }

// TakesChoice reports whether w is a multiple_choice or free_text checkpoint, answered
// with a choice rather than a plain approve.
func TakesChoice(w *arv1.WaitingOn) bool { return takesChoice(w) }

// ClearHint says what clears a wait that no answer clears.
func ClearHint(w *arv1.WaitingOn) string { return clearHint(w) }

// CostText is the run's cost as describe shows it: "unknown" when a call
// could not be priced, never $0 for it.
func CostText(u arv1.Usage) string { return costText(u) }

// SteerPatches are the merge patches of pause, resume and cancel.
var SteerPatches = map[string]string{
	"pause":  `{"spec":{"paused":true}}`,
	"resume": `{"spec":{"paused":false}}`,
	"cancel": `{"spec":{"cancel":true}}`,
}

// ConsoleOptions are the console command's flags.
type ConsoleOptions struct {
	Address string
	Port    int
	// Namespace is the one the page opens on (-n, else the context's).
	Namespace string
	// InCluster: people sign in with their own bearer tokens, and the
	// kubeconfig's (or the Pod's) credentials are never used.
	InCluster bool
	Out       io.Writer
}

// ConsoleServer serves the web console for `kubectl agentrun console`
// with cfg, the user's own credentials, until ctx ends. internal/console
// builds on this package, so it cannot be imported here:
// cmd/kubectl-agentrun sets it.
var ConsoleServer func(ctx context.Context, cfg *rest.Config, o ConsoleOptions) error

// consoleSpec is `kubectl agentrun console`.
func consoleSpec() spec {
	var addr string
	var port int
	var inCluster bool
	return spec{use: "console", short: "Open the web console on this machine", group: groupInspect,
		long: `Serve the web console on a loopback address and print its URL: run trees
(those needing a person first, live), each run's stages, wait, usage, cost,
transcript, regions and output, and buttons to answer, pause, resume and
cancel. The page acts with your kubeconfig's credentials, and shows only
the buttons the API server would let you use. The URL carries a one-time
key: only a browser that opened it can use the console. Ctrl-C stops it.`,
		example: `  kubectl agentrun console -n team-a
  kubectl agentrun console --port 8765`,
		flags: func(fs *pflag.FlagSet, _ *options) {
			fs.StringVar(&addr, "address", "127.0.0.1", "the address to listen on (keep it a loopback address)")
			fs.IntVar(&port, "port", 0, "the port to listen on (0: any free port)")
			fs.BoolVar(&inCluster, "in-cluster", false, "serve many people, each signing in with a bearer token (the Helm chart's console)")
		},
		check: func(cmd *cobra.Command, o options) error {
			if port < 0 || port > 65535 {
				return usagef("--port %d is not a port (0 to 65535)", port)
			}
			return noArgs(cmd, o)
		},
		run: func(a *app, ctx context.Context, _ client.Client, ns string, _ options) error {
			if ConsoleServer == nil {
				return errors.New("this build of the plugin has no web console")
			}
			return ConsoleServer(ctx, a.cfg, ConsoleOptions{Address: addr, Port: port, Namespace: ns, InCluster: inCluster, Out: a.stdout})
		},
		endless: true,
	}
}
