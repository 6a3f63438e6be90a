// Package plugin is the kubectl plugin `kubectl agentrun`: a listing of run
// trees that puts runs needing a person first, a run record, the wire
// run-state, pause/resume/cancel, answers to what a run waits on
// (approve/deny, answer, resolve), a run's output and its transcript. The
// binary in cmd/kubectl-agentrun only calls Main.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/wire"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// requestTimeout bounds the whole command, so a dead API server fails it
// instead of hanging a terminal.
const requestTimeout = 60 * time.Second

// app is one invocation. Tests replace now and connect.
type app struct {
	stdout, stderr io.Writer
	now            func() time.Time
	connect        func(o options) (client.Client, string, error)
	// pollEvery and waitFor pace --wait.
	pollEvery, waitFor time.Duration
}

// Main runs the plugin with args as os.Args (args[0] is the program name)
// and returns the exit code: 0 ok, 1 error (message on stderr), 2 usage.
func Main(args []string, stdout, stderr io.Writer) int {
	logf.SetLogger(logr.Discard())
	a := &app{stdout: stdout, stderr: stderr, now: time.Now, connect: connect, pollEvery: answerPollEvery, waitFor: answerWaitFor}
	return a.run(args[1:])
}

type command struct {
	name    string
	summary string
	usage   string
	flags   flagSet
	// positional is how many positional arguments it takes (a run name: 1).
	positional int
	// check, when set, validates the arguments instead (answer commands,
	// whose arguments vary), so mistakes exit 2 before any request.
	check func(o options) error
	run   func(a *app, ctx context.Context, c client.Client, ns string, o options) error
}

var commands []*command

func init() {
	commands = []*command{
		{name: "ps", summary: "List runs as trees, the ones needing a person first", flags: flagSet{allNamespaces: true, leases: true},
			usage: `Usage: kubectl agentrun ps [-n NAMESPACE | -A]

List AgentRuns as trees (children under their parent) with their phase, what
they wait on, stage, tokens, cost, working time and time since they last
moved, and the manager replica that drives each unfinished run (from the
operator's Leases when you may read them). Runs that need a person come
first, then the newest. The footer counts the runs that need an answer.

Flags:
  -A, --all-namespaces   list runs in every namespace
` + leaseFlag + `` + commonFlags, run: (*app).ps},
		{name: "describe", summary: "Show a run's record", positional: 1, flags: flagSet{leases: true},
			usage: `Usage: kubectl agentrun describe NAME [-n NAMESPACE]

Show the run record: agent, task, phase, the replica driving it, stage,
iteration, model, tokens, cost, age / working time / last moved, what it
waits on and how to clear it, the pending call, error, final output and
conditions.

Flags:
` + leaseFlag + `` + commonFlags, run: (*app).describe},
		{name: "status", summary: "Print a run's wire state", positional: 1, flags: flagSet{output: true},
			usage: `Usage: kubectl agentrun status NAME [-o json] [-n NAMESPACE]

Print the run's status. With -o json, print the run-state object
{"status","usage","next_seq","pending"} exactly as every agentrun surface
returns it.

Flags:
  -o, --output json      print the run-state object as JSON
` + commonFlags, run: (*app).status},
		{name: "pause", summary: "Pause a run (spec.paused: true)", positional: 1,
			usage: `Usage: kubectl agentrun pause NAME [-n NAMESPACE]

Set spec.paused to true. A step already in flight finishes; no new step
starts until the run is resumed.

Flags:
` + commonFlags, run: patchSpec(`{"spec":{"paused":true}}`, "paused")},
		{name: "resume", summary: "Resume a paused run (spec.paused: false)", positional: 1,
			usage: `Usage: kubectl agentrun resume NAME [-n NAMESPACE]

Set spec.paused to false, so the run goes on.

Flags:
` + commonFlags, run: patchSpec(`{"spec":{"paused":false}}`, "resumed")},
		{name: "cancel", summary: "Cancel a run for good (spec.cancel: true)", positional: 1,
			usage: `Usage: kubectl agentrun cancel NAME [-n NAMESPACE]

Set spec.cancel to true: in-flight work is abandoned, children are cancelled
and the run ends Cancelled. A cancel cannot be withdrawn.

Flags:
` + commonFlags, run: patchSpec(`{"spec":{"cancel":true}}`, "cancel requested")},
		{name: "output", summary: "Print a run's final output", positional: 1,
			usage: `Usage: kubectl agentrun output NAME [-n NAMESPACE]

Print the run's final output (the "output" key of the ConfigMap named by
status.finalOutput.objectName), byte for byte. Exits 1 when the run has no
output.

Flags:
` + commonFlags, run: (*app).output},
		{name: "regions", summary: "Show a run's regions (its named documents)", check: regionArgs,
			usage: `Usage: kubectl agentrun regions NAME [REGION] [-n NAMESPACE]

Show the regions the run holds, as its journal records them: each region's
size, who wrote it last (spec, model, fan-out <stage>, or the person who
edited it at a checkpoint) and its content. With REGION, print only that
region's content, byte for byte (exit 1 when the run holds no such region),
for instance to edit a draft before kubectl agentrun answer --edit-file.

Flags:
` + commonFlags, run: (*app).regions},
		{name: "transcript", summary: "Print a run's journal, one line per entry", positional: 1,
			usage: `Usage: kubectl agentrun transcript NAME [-n NAMESPACE]

Print the run's journal (its model calls, answers, failures, checkpoint
answers and cancellation) one line per entry, in sequence order.

Flags:
` + commonFlags, run: (*app).transcript},
	}
	commands = append(commands, answerCommand("approve", "Approve what a run waits on (checkpoint, tool call, review)", flagSet{},
		`Usage: kubectl agentrun approve NAME [--wait] [-n NAMESPACE]

Approve what the run waits on (status.waitingOn.point): a checkpoint (the
run goes on), a tool call (it is made), a write after tainted input (it is
allowed) or a review the agent presented.
`+answerHow+`
Flags:
`),
		answerCommand("deny", "Deny what a run waits on (a checkpoint cancels the run)", flagSet{reason: true},
			`Usage: kubectl agentrun deny NAME [--reason TEXT] [--wait] [-n NAMESPACE]

Deny what the run waits on (status.waitingOn.point): a checkpoint (the run is
cancelled), a tool call or a write after tainted input (the call is not made
and the agent is told so), or a review the agent presented (the agent gets
the reason as feedback).
`+answerHow+`
Flags:
      --reason TEXT      why (spec.text): told to the agent for a tool call,
                         taint gate or review; recorded for a checkpoint
`),
		answerCommand("answer", "Answer a run's question, deliver its signal, or edit or revise at a checkpoint", flagSet{input: true},
			`Usage: kubectl agentrun answer NAME (TEXT | --json JSON | --null) [--wait] [-n NAMESPACE]
       kubectl agentrun answer NAME (--choice TEXT | --edit TEXT | --edit-file PATH | --revise TEXT) [--wait] [-n NAMESPACE]

Answer the question the agent asked (UserPrompt; the question is
status.waitingOn.question), or deliver the payload of the signal the run
waits for (Signal). TEXT is a plain answer: free text, one of the offered
choices, or yes/no. --json gives the answer as JSON, which must satisfy the
question's input schema; --null answers JSON null. A TEXT beginning with "-"
goes after "--".

At a checkpoint (InteractionPoint), --choice passes a multiple_choice point
with one of its options (or, at a free_text point, your answer); the next
stage is told it. Choosing one of the point's abort options cancels the run.
At a checkpoint whose point offers edit_options, --edit
or --edit-file passes it with your edit of the draft it shows (see
kubectl agentrun regions NAME): the edit replaces the draft, and the next
stage gets it. At one that offers directives, --revise sends the stage back
with your instructions.
`+answerHow+`
Flags:
      --json JSON        the answer as JSON text (checked here that it parses)
      --null             the answer is JSON null
      --choice TEXT      a checkpoint: pass it with this option or free text
      --edit TEXT        a checkpoint: pass it with this edit of its draft
      --edit-file PATH   a checkpoint: the same, the edit read from PATH
      --revise TEXT      a checkpoint: send its stage back with these instructions
`),
		answerCommand("resolve", "Settle a run's dangling write (done, retry, abandon)", flagSet{resolve: true},
			`Usage: kubectl agentrun resolve NAME (--done (--output TEXT | --output-json JSON) | --retry | --abandon) [--wait] [-n NAMESPACE]

Settle a dangling write (NeedsReconciliation): a write tool call that
started, but whose outcome the run cannot know. Check the system it writes
to, then say --done if it happened, with its output (which the agent sees as
the call's result), --retry if it did not (it is issued again), or --abandon
to end the run.
`+answerHow+`
Flags:
      --done             the write happened
      --output TEXT      with --done: the write's output, as text
      --output-json JSON with --done: the write's output, as JSON
      --retry            the write did not happen: issue it again
      --abandon          end the run, recording the unresolved write
`))
}

// answerHow is what every answer command's usage says about answers.
const answerHow = `
The answer is an AgentRunAnswer created in your name (the user the
kubeconfig authenticates); creating one needs RBAC to create
agentrunanswers, which is granted apart from editing runs.
`

// waitFlag is the --wait line of every answer command's usage.
const waitFlag = `      --wait             wait up to 30s for the run to take the answer; exit 1
                         if it is rejected
`

// answerCommand is a command that creates an AgentRunAnswer.
func answerCommand(name, summary string, fs flagSet, usage string) *command {
	fs.wait = true
	return &command{name: name, summary: summary, flags: fs, usage: usage + waitFlag + commonFlags,
		check: func(o options) error { _, err := replyParsers[name](o); return err },
		run:   answerCmd(name)}
}

// leaseFlag is the usage line of --lease-namespace (ps, describe).
const leaseFlag = `      --lease-namespace NS  where the operator's Leases are (default: agentrun-system)
`

const commonFlags = `  -n, --namespace NS     the namespace (default: the kubeconfig context's)
      --kubeconfig PATH  kubeconfig file (default: $KUBECONFIG, ~/.kube/config)
      --context NAME     kubeconfig context
  -h, --help             show this help
`

func topUsage() string {
	var b strings.Builder
	b.WriteString("kubectl agentrun: inspect and steer AgentRuns.\n\nUsage: kubectl agentrun COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'kubectl agentrun COMMAND --help' for a command's flags.\n")
	return b.String()
}

func (a *app) run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, topUsage())
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		if len(args) > 1 && name == "help" {
			if c := lookup(args[1]); c != nil {
				fmt.Fprint(a.stdout, c.usage)
				return ExitOK
			}
		}
		fmt.Fprint(a.stdout, topUsage())
		return ExitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(a.stderr, "error: unknown command %q\n\n%s", name, topUsage())
		return ExitUsage
	}
	o, err := parseArgs(args[1:], c.flags)
	if err != nil {
		fmt.Fprintf(a.stderr, "error: %v\n\n%s", err, c.usage)
		return ExitUsage
	}
	if o.help {
		fmt.Fprint(a.stdout, c.usage)
		return ExitOK
	}
	if c.check != nil {
		if err := c.check(o); err != nil {
			fmt.Fprintf(a.stderr, "error: %v\n\n%s", err, c.usage)
			return ExitUsage
		}
	} else if len(o.args) != c.positional {
		if c.positional == 0 {
			fmt.Fprintf(a.stderr, "error: %s takes no arguments, got %q\n\n%s", c.name, o.args, c.usage)
		} else {
			fmt.Fprintf(a.stderr, "error: %s takes exactly one run NAME\n\n%s", c.name, c.usage)
		}
		return ExitUsage
	}
	if o.allNamespaces && o.namespace != "" {
		fmt.Fprintf(a.stderr, "error: -n/--namespace and -A/--all-namespaces cannot be used together\n\n%s", c.usage)
		return ExitUsage
	}
	if o.output != "" && o.output != "json" {
		fmt.Fprintf(a.stderr, "error: unsupported output format %q (supported: json)\n\n%s", o.output, c.usage)
		return ExitUsage
	}
	cl, ns, err := a.connect(o)
	if err != nil {
		fmt.Fprintf(a.stderr, "error: %v\n", err)
		return ExitError
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := c.run(a, ctx, cl, ns, o); err != nil {
		if errors.Is(err, errRejected) { // the verdict is printed already
			return ExitError
		}
		fmt.Fprintf(a.stderr, "error: %v\n", explain(err))
		return ExitError
	}
	return ExitOK
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// explain turns API errors a person can act on into sentences.
func explain(err error) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("the AgentRun API (%s) is not installed in this cluster: %w", arv1.GroupVersion, err)
	}
	return err
}

// connect loads the kubeconfig the way kubectl does ($KUBECONFIG, then
// ~/.kube/config; --kubeconfig and --context override) and returns a client
// and the namespace to use.
func connect(o options) (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	if o.namespace != "" {
		overrides.Context.Namespace = o.namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-agentrun"
	cfg.Timeout = requestTimeout
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := authenticationv1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	if err := arv1.AddToScheme(scheme); err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, ns, nil
}

// defaultLeaseNamespace is where the kustomize base runs the operator.
const defaultLeaseNamespace = "agentrun-system"

// readOwnership reads who holds the shards from the operator's Leases;
// nil when they cannot be read (no access to that namespace, say): the
// listing then shows status.driver as written.
func readOwnership(ctx context.Context, c client.Client, o options) *shards.Ownership {
	ns := o.leaseNamespace
	if ns == "" {
		ns = defaultLeaseNamespace
	}
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(ns), client.HasLabels{shards.LabelLease}); err != nil {
		return nil
	}
	own := shards.ReadOwnership(leases.Items, time.Now())
	return &own
}

// getRun fetches one run, with a not-found message that names the namespace.
func getRun(ctx context.Context, c client.Client, ns, name string) (*arv1.AgentRun, error) {
	var run arv1.AgentRun
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &run); err != nil {
		if apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("agentrun %q not found in namespace %q", name, ns)
		}
		return nil, err
	}
	return &run, nil
}

func (a *app) ps(ctx context.Context, c client.Client, ns string, o options) error {
	var list arv1.AgentRunList
	var opts []client.ListOption
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return err
	}
	if len(list.Items) == 0 {
		if o.allNamespaces {
			fmt.Fprintln(a.stderr, "No AgentRuns found.")
		} else {
			fmt.Fprintf(a.stderr, "No AgentRuns found in namespace %q.\n", ns)
		}
		return nil
	}
	return RenderPs(a.stdout, list.Items, a.now(), o.allNamespaces, readOwnership(ctx, c, o))
}

func (a *app) describe(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	entries, _, err := store.ReadLenient(ctx, c, ns, run.UID)
	if err != nil {
		return err
	}
	return RenderDescribe(a.stdout, run, a.now(), readOwnership(ctx, c, o), Failovers(entries)...)
}

func (a *app) status(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	state := wire.RunState(run, a.now())
	if o.output == "json" {
		b, err := json.MarshalIndent(state, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	st := wire.Status(run, a.now())
	fmt.Fprintf(a.stdout, "%s/%s: %s\n", run.Namespace, run.Name, st.String("state"))
	for _, f := range st[1:] {
		fmt.Fprintf(a.stdout, "  %s: %s\n", f.Key, plain(f.Value))
	}
	fmt.Fprintf(a.stdout, "pending: %s\n", plain(wire.Pending(run)))
	return nil
}

// plain renders a wire value for a person: strings bare, the rest as JSON.
func plain(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// patchSpec is a command that merge-patches the run's spec.
func patchSpec(patch, done string) func(a *app, ctx context.Context, c client.Client, ns string, o options) error {
	return func(a *app, ctx context.Context, c client.Client, ns string, o options) error {
		run := &arv1.AgentRun{}
		run.Namespace, run.Name = ns, o.args[0]
		if err := c.Patch(ctx, run, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			if apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
				return fmt.Errorf("agentrun %q not found in namespace %q", o.args[0], ns)
			}
			return err
		}
		fmt.Fprintf(a.stdout, "agentrun.%s/%s %s\n", arv1.GroupVersion.Group, run.Name, done)
		if run.Status.Phase.IsTerminal() {
			fmt.Fprintf(a.stderr, "note: the run is already %s; this changes nothing it does\n", run.Status.Phase)
		}
		return nil
	}
}

func (a *app) output(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	d := run.Status.FinalOutput
	if d == nil || d.ObjectName == "" {
		phase := string(run.Status.Phase)
		if phase == "" {
			phase = "not started"
		}
		return fmt.Errorf("run %s/%s has no output (phase: %s)", ns, run.Name, phase)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: d.ObjectName}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("run %s/%s names output ConfigMap %q, which does not exist", ns, run.Name, d.ObjectName)
		}
		return err
	}
	text, ok := cm.Data["output"]
	if !ok {
		return fmt.Errorf("output ConfigMap %s/%s has no \"output\" key", ns, d.ObjectName)
	}
	if _, err := io.WriteString(a.stdout, text); err != nil {
		return err
	}
	if d.Truncated {
		fmt.Fprintf(a.stderr, "note: the stored output was cut at the 256 KiB cap (%d bytes were submitted)\n", d.Bytes)
	}
	return nil
}

func (a *app) transcript(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	entries, unreadable, err := store.ReadLenient(ctx, c, ns, run.UID)
	if err != nil {
		return err
	}
	if len(entries)+len(unreadable) == 0 {
		fmt.Fprintf(a.stderr, "run %s/%s has no journal entries yet\n", ns, run.Name)
		return nil
	}
	return RenderTranscript(a.stdout, entries, unreadable)
}
