package plugin

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// options are one command's flags and positional arguments, bound by
// cobra as it parses the command line.
type options struct {
	args           []string
	allNamespaces  bool // -A (ps)
	watch          bool // -w (ps)
	follow         bool // -f (transcript)
	leaseNamespace string
	// operatorNamespace is where the manager runs (check).
	operatorNamespace string
	// print is -o and the template flags (ps, status); output is its
	// format once parsed.
	print  *genericclioptions.PrintFlags
	output string

	// Answer commands. The value flags are pointers because an empty value
	// is still an answer (an empty output, an empty string).
	wait        bool    // --wait
	reason      *string // --reason (approve, deny)
	callArgs    *string // --args (approve: a tool call's edited arguments)
	json        *string // --json (answer)
	null        bool    // --null (answer)
	done        bool    // --done (resolve)
	retry       bool    // --retry (resolve)
	abandon     bool    // --abandon (resolve)
	writeOutput *string // --output (resolve; not -o)
	writeJSON   *string // --output-json (resolve)
	edit        *string // --edit (answer: a checkpoint's edited draft)
	editFile    *string // --edit-file (answer: the same, read from a file)
	revise      *string // --revise (answer: instructions sending the stage back)
	choice      *string // --choice (answer: a checkpoint's option or free text)

	rerun   rerunOptions   // rerun and fork
	history historyOptions // history and cost
}

// textValue is a flag whose value is answer text: nil until given, so that
// --reason "" or --output "" is still an answer.
type textValue struct{ p **string }

func (t textValue) String() string {
	if *t.p == nil {
		return ""
	}
	return **t.p
}
func (t textValue) Set(s string) error { *t.p = &s; return nil }
func (t textValue) Type() string       { return "string" }

func textVar(fs *pflag.FlagSet, p **string, name, usage string) { fs.Var(textValue{p}, name, usage) }

// spec is one command before cobra sees it.
type spec struct {
	use, short, long, example, group string
	// flags registers the command's own flags, bound to o.
	flags func(fs *pflag.FlagSet, o *options)
	// check validates arguments and flags, so that mistakes exit 2 before
	// any request; nil takes exactly one run NAME.
	check func(cmd *cobra.Command, o options) error
	// runNames is how many leading arguments are run names (completion).
	runNames int
	// printing: -o goes through cli-runtime's printers.
	printing bool
	// endless: the command runs until interrupted (no overall bound).
	endless bool
	run     func(a *app, ctx context.Context, c client.Client, ns string, o options) error
}

// Command groups of the help.
const (
	groupInspect = "inspect"
	groupSteer   = "steer"
	groupAnswer  = "answer"
	groupInstall = "install"
)

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-agentrun",
		Short: "Inspect and steer AgentRuns",
		Long: `kubectl agentrun: inspect and steer AgentRuns (agentrun.dev/v1alpha1).

Every kubectl connection flag works (--context, --kubeconfig, -n, --as,
--as-group, --token, --server, --request-timeout, ...), before or after
the command. Shell completion: kubectl agentrun completion --help.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl agentrun"},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE:          func(*cobra.Command, []string) error { return usagef("name a command") },
	}
	a.flags.AddFlags(root.PersistentFlags())
	a.registerFlagCompletions(root)
	root.AddGroup(&cobra.Group{ID: groupInspect, Title: "Inspect runs:"},
		&cobra.Group{ID: groupSteer, Title: "Steer runs:"},
		&cobra.Group{ID: groupAnswer, Title: "Answer what a run waits on:"},
		&cobra.Group{ID: groupInstall, Title: "Check the install:"})
	for _, s := range specs() {
		root.AddCommand(a.command(s))
	}
	root.SetOut(a.stdout) // before the completion command takes its writer
	root.SetErr(a.stderr)
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("no completion for %q: give bash, zsh, fish or powershell", args[0])
			}
			return cmd.Help()
		}
	}
	return root
}

// command turns s into a cobra command whose flags bind a fresh options.
func (a *app) command(s spec) *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{Use: s.use, Short: s.short, Long: s.long, Example: s.example, GroupID: s.group,
		ValidArgsFunction: a.completeRuns(s.runNames)}
	if s.flags != nil {
		s.flags(cmd.Flags(), o)
	}
	for _, f := range []string{"lease-namespace", "operator-namespace"} {
		if cmd.Flags().Lookup(f) != nil {
			_ = cmd.RegisterFlagCompletionFunc(f, a.completeNamespaces)
		}
	}
	if s.printing {
		o.print = genericclioptions.NewPrintFlags("")
		o.print.AddFlags(cmd)
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		o.args = args
		a.parsed = o
		if o.print != nil {
			o.output = *o.print.OutputFormat
		}
		if s.check != nil {
			return s.check(cmd, *o)
		}
		return oneName(cmd.Name(), *o)
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := a.runCommand(cmd, s, *o); err != nil {
			return &runError{err}
		}
		return nil
	}
	return cmd
}

// runCommand connects and runs one command, within --request-timeout
// (plus --wait's 30s; no overall bound for a watch or a --follow, which
// run until interrupted, nor with --request-timeout=0).
func (a *app) runCommand(cmd *cobra.Command, s spec, o options) error {
	cfg, err := a.restConfig()
	if err != nil {
		return err
	}
	c, ns, err := a.connect(cfg)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	bound := cfg.Timeout
	if o.wait { // --wait's own bound comes on top of the requests'
		bound += a.waitFor
	}
	if cfg.Timeout > 0 && !o.watch && !o.follow && !s.endless {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	a.cfg = cfg
	return s.run(a, ctx, c, ns, o)
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, o options) error {
	if len(o.args) != 0 {
		return usagef("%s takes no arguments, got %q", cmd.Name(), o.args)
	}
	return nil
}

func leaseFlag(fs *pflag.FlagSet, o *options) {
	fs.StringVar(&o.leaseNamespace, "lease-namespace", "", "the operator's namespace, where its Leases and priority classes are read (default: "+defaultLeaseNamespace+")")
}

// transcriptHelp is transcript's long help.
const transcriptHelp = `Print the run's journal (its model calls, answers, failures, checkpoint
answers and cancellation) one line per entry, in sequence order. --follow
then prints each entry as it is journaled (a watch of the journal and the
run, not polling) until the run ends, or until Ctrl-C. For a run whose
journal is in the database (status.journalStore Database), and for a run
that is gone (its archived record; stderr says so), the journal is read
through the history API (history.agentrun.dev). There --follow watches the
run and reads the journal again each time the run's status changes, never
polling: an entry shows when the status moves past it, at once for a wait,
a phase change, an error and the end, and within the manager's
--status-interval (10s) while the run goes from one model call to the next.`

func specs() []spec {
	inspect := []spec{
		{use: "ps", short: "List runs as trees, the ones needing a person first", group: groupInspect, printing: true,
			long: `List AgentRuns as trees (children under their parent) with their phase, what
they wait on, stage, tokens, cost, working time and time since they last
moved, and the manager replica that drives each unfinished run (from the
operator's Leases when you may read them). Runs that need a person come
first, then the newest. The footer counts the runs that need an answer.

-o wide adds the agent, the wire state and the age; -o json, yaml, name,
jsonpath=... and go-template=... print the AgentRun objects as kubectl get
does. --watch prints the listing, then one line per change as the API
server reports it (a watch, not polling), and the footer again when the
count of runs needing an answer changes.`,
			example: `  kubectl agentrun ps -A
  kubectl agentrun ps -n team-a -o wide
  kubectl agentrun ps -n team-a --watch
  kubectl agentrun ps -A -o jsonpath='{.items[*].metadata.name}'`,
			flags: func(fs *pflag.FlagSet, o *options) {
				fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list runs in every namespace")
				fs.BoolVarP(&o.watch, "watch", "w", false, "after the listing, print each change as it happens")
				leaseFlag(fs, o)
			},
			check: psArgs, run: (*app).ps},
		{use: "describe NAME", short: "Show a run's record", group: groupInspect, runNames: 1,
			long: `Show the run record: agent, task, phase, the replica driving it, stage,
iteration, model, tokens, cost, age / working time / last moved, what it
waits on and how to clear it, the pending call, error, final output and
conditions, and the model failovers its journal records. For a run whose
journal is in the database (status.journalStore Database), the journal is
read through the history API (history.agentrun.dev) as you.`,
			flags: leaseFlag, run: (*app).describe},
		{use: "status NAME", short: "Print a run's wire state", group: groupInspect, runNames: 1, printing: true,
			long: `Print the run's status. With -o json, print the run-state object
{"status","usage","next_seq","pending"} exactly as every agentrun surface
returns it; -o yaml, jsonpath=... and go-template=... render the same
object; -o name prints agentrun.agentrun.dev/NAME.`,
			example: `  kubectl agentrun status review-pr -o json
  kubectl agentrun status review-pr -o jsonpath='{.status.state}'`,
			check: statusArgs, run: (*app).status},
		{use: "output NAME", short: "Print a run's final output", group: groupInspect, runNames: 1,
			long: `Print the run's final output (the "output" key of the ConfigMap named by
status.finalOutput.objectName), byte for byte. Exits 1 when the run has no
output. For a run whose journal is in the database (status.journalStore
Database), and for a run that is gone (its archived record; stderr says
so), the output is read through the history API (history.agentrun.dev).`, run: (*app).output},
		{use: "regions NAME [REGION]", short: "Show a run's regions (its named documents)", group: groupInspect, runNames: 1,
			long: `Show the regions the run holds, as its journal records them: each region's
size, who wrote it last (spec, model, fan-out <stage>, or the person who
edited it at a checkpoint) and its content. With REGION, print only that
region's content, byte for byte (exit 1 when the run holds no such region),
for instance to edit a draft before kubectl agentrun answer --edit-file.
For a run whose journal is in the database (status.journalStore Database),
the journal is read through the history API (history.agentrun.dev) as you.`,
			check: regionArgs, run: (*app).regions},
		{use: "transcript NAME", short: "Print a run's journal, one line per entry", group: groupInspect, runNames: 1,
			long: transcriptHelp,
			example: `  kubectl agentrun transcript review-pr
  kubectl agentrun transcript -f review-pr`,
			flags: func(fs *pflag.FlagSet, o *options) {
				fs.BoolVarP(&o.follow, "follow", "f", false, "after the journal so far, print each entry as it is journaled, until the run ends")
			},
			run: (*app).transcript},
	}
	steer := []spec{
		{use: "pause NAME", short: "Pause a run (spec.paused: true)", group: groupSteer, runNames: 1,
			long: `Set spec.paused to true. A step already in flight finishes; no new step
starts until the run is resumed.`, run: patchSpec(SteerPatches["pause"], "paused")},
		{use: "resume NAME", short: "Resume a paused run (spec.paused: false)", group: groupSteer, runNames: 1,
			long: `Set spec.paused to false, so the run goes on.`, run: patchSpec(SteerPatches["resume"], "resumed")},
		{use: "cancel NAME", short: "Cancel a run for good (spec.cancel: true)", group: groupSteer, runNames: 1,
			long: `Set spec.cancel to true: in-flight work is abandoned, children are cancelled
and the run ends Cancelled. A cancel cannot be withdrawn.`, run: patchSpec(SteerPatches["cancel"], "cancel requested")},
	}
	steer = append(steer, rerunSpecs()...)
	inspect = append(inspect, consoleSpec(), historySpec(), costSpec())
	return append(append(append(inspect, steer...), answerSpecs()...), checkSpec())
}

func checkSpec() spec {
	return spec{use: "check", short: "Check the install and what a namespace's runs need", group: groupInstall,
		long: `Check the operator's install, one line each: OK, FIX (what is wrong and
how to fix it) or SKIP (you may not read it; RBAC). Exits 1 when something
needs fixing, 0 otherwise (SKIP lines too).

Cluster-wide: the CRDs (installed, established, serving and storing the
version this plugin speaks), the admission policy that signs answers with
their creator, the manager's Deployment (every replica ready), its shard
Leases (or the leader's: who holds each, and whether it expired) and the
egress policy in force (the manager's --egress-* flags with the egress
ConfigMap, which must parse).

With -n NAMESPACE (or -A: every namespace with unfinished runs): the
provider ConfigMaps its runs use (and agentrun-providers with -n) exist
and parse, the Secrets they name hold their keys (no value is printed),
and which runs wait on setup (NeedsSetup) with their remedy.`,
		example: `  kubectl agentrun check
  kubectl agentrun check -n team-a
  kubectl agentrun check -A --operator-namespace agentrun-operator`,
		flags: func(fs *pflag.FlagSet, o *options) {
			fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "also check every namespace with unfinished runs")
			fs.StringVar(&o.operatorNamespace, "operator-namespace", "", "where the manager's Deployment runs (default: "+defaultLeaseNamespace+")")
		},
		check: func(cmd *cobra.Command, o options) error {
			if err := noArgs(cmd, o); err != nil {
				return err
			}
			if o.allNamespaces && cmd.Flags().Changed("namespace") {
				return usagef("-n/--namespace and -A/--all-namespaces cannot be used together")
			}
			return nil
		},
		run: (*app).check}
}

// psArgs: no arguments, and -A is not given with -n; the output format is
// one ps can print.
func psArgs(cmd *cobra.Command, o options) error {
	if err := noArgs(cmd, o); err != nil {
		return err
	}
	if o.allNamespaces && cmd.Flags().Changed("namespace") {
		return usagef("-n/--namespace and -A/--all-namespaces cannot be used together")
	}
	if o.output == "" || o.output == "wide" {
		return nil
	}
	if _, err := o.print.ToPrinter(); err != nil {
		return usagef("unsupported output format %q (supported: wide, %s)", o.output, joinFormats(o.print))
	}
	return nil
}

// statusArgs: one run NAME and a format that renders a run state.
func statusArgs(cmd *cobra.Command, o options) error {
	if err := oneName(cmd.Name(), o); err != nil {
		return err
	}
	switch o.output {
	case "", "json":
		return nil
	case "wide":
		return usagef("unsupported output format \"wide\": status prints one run state, not a table (supported: %s)", joinFormats(o.print))
	}
	if _, err := o.print.ToPrinter(); err != nil {
		return usagef("unsupported output format %q (supported: %s)", o.output, joinFormats(o.print))
	}
	return nil
}

func joinFormats(p *genericclioptions.PrintFlags) string {
	return strings.Join(p.AllowedFormats(), ", ")
}

// waitFlag is the --wait flag of every answer command.
func waitFlag(fs *pflag.FlagSet, o *options) {
	fs.BoolVar(&o.wait, "wait", false, "wait up to 30s for the run to take the answer; exit 1 if it is rejected")
}

// reasonFlag is approve's and deny's --reason.
func reasonFlag(fs *pflag.FlagSet, o *options) {
	textVar(fs, &o.reason, "reason", "why (spec.reason): told to the agent when a tool call, taint gate or review is denied; kept in the journal and transcript")
}

// answerHow is what every answer command's help says about answers.
const answerHow = `

The answer is an AgentRunAnswer created in your name (the user the
kubeconfig authenticates, or the one --as names); creating one needs RBAC
to create agentrunanswers, which is granted apart from editing runs.`

func answerSpecs() []spec {
	return []spec{
		answerSpec("approve NAME [--args FILE|JSON|-] [--reason TEXT]", "Approve what a run waits on (checkpoint, tool call, review)",
			`Approve what the run waits on (status.waitingOn.point): a checkpoint (the
run goes on), a tool call (it is made), a write after tainted input (it is
allowed) or a review the agent presented.

A tool call (ToolApproval) may be approved with edited arguments: --args
takes a JSON object inline, a file holding one, or - to read it from stdin.
The run checks them against the tool's input schema; the call is made with
them, and the agent is told it ran with them. The tool policies are
evaluated again on them and may deny the call or hold it for another
approval: with --wait, what became of the edited call is printed (Applied,
Denied by a policy's rule, exit 1, or Held), read from the run's journal:
its ConfigMaps, read every 250ms, or, for a journal in the database, the
history API, read again each time the run changes (a watch, not polling).`, func(fs *pflag.FlagSet, o *options) {
				textVar(fs, &o.callArgs, "args", "a tool call: approve it with these arguments instead (a JSON object, a FILE holding one, or - for stdin)")
				reasonFlag(fs, o)
			}),
		answerSpec("deny NAME", "Deny what a run waits on (a checkpoint cancels the run)",
			`Deny what the run waits on (status.waitingOn.point): a checkpoint (the run is
cancelled), a tool call or a write after tainted input (the call is not made
and the agent is told so), or a review the agent presented (the agent gets
the reason as feedback).`, func(fs *pflag.FlagSet, o *options) {
				reasonFlag(fs, o)
			}),
		answerSpec("answer NAME (TEXT | --json JSON | --null | --choice TEXT | --edit TEXT | --edit-file PATH | --revise TEXT)",
			"Answer a run's question, deliver its signal, or edit or revise at a checkpoint",
			`Answer the question the agent asked (UserPrompt; the question is
status.waitingOn.question), or deliver the payload of the signal the run
waits for (Signal). TEXT is a plain answer: free text, one of the offered
choices, or yes/no. --json gives the answer as JSON, which must satisfy the
question's input schema; --null answers JSON null. A TEXT beginning with "-"
goes after "--".

At a checkpoint (InteractionPoint), --choice passes a multiple_choice point
with one of its options (or, at a free_text point, your answer); the next
stage is told it. Choosing one of the point's abort options cancels the run.
At a checkpoint whose point offers edit_options, --edit or --edit-file
passes it with your edit of the draft it shows (see kubectl agentrun
regions NAME): the edit replaces the draft, and the next stage gets it. At
one that offers directives, --revise sends the stage back with your
instructions.`, func(fs *pflag.FlagSet, o *options) {
				textVar(fs, &o.json, "json", "the answer as JSON text (checked here that it parses)")
				fs.BoolVar(&o.null, "null", false, "the answer is JSON null")
				textVar(fs, &o.choice, "choice", "a checkpoint: pass it with this option or free text")
				textVar(fs, &o.edit, "edit", "a checkpoint: pass it with this edit of its draft")
				textVar(fs, &o.editFile, "edit-file", "a checkpoint: the same, the edit read from this file")
				textVar(fs, &o.revise, "revise", "a checkpoint: send its stage back with these instructions")
			}),
		answerSpec("resolve NAME (--done (--output TEXT | --output-json JSON) | --retry | --abandon)",
			"Settle a run's dangling write (done, retry, abandon)",
			`Settle a dangling write (NeedsReconciliation): a write tool call that
started, but whose outcome the run cannot know. Check the system it writes
to, then say --done if it happened, with its output (which the agent sees as
the call's result), --retry if it did not (it is issued again), or --abandon
to end the run.`, func(fs *pflag.FlagSet, o *options) {
				fs.BoolVar(&o.done, "done", false, "the write happened")
				textVar(fs, &o.writeOutput, "output", "with --done: the write's output, as text")
				textVar(fs, &o.writeJSON, "output-json", "with --done: the write's output, as JSON")
				fs.BoolVar(&o.retry, "retry", false, "the write did not happen: issue it again")
				fs.BoolVar(&o.abandon, "abandon", false, "end the run, recording the unresolved write")
			}),
	}
}

// answerSpec is a command that creates an AgentRunAnswer.
func answerSpec(use, short, long string, flags func(fs *pflag.FlagSet, o *options)) spec {
	name := strings.Fields(use)[0]
	return spec{use: use, short: short, long: long + answerHow, group: groupAnswer, runNames: 1,
		flags: func(fs *pflag.FlagSet, o *options) {
			waitFlag(fs, o)
			if flags != nil {
				flags(fs, o)
			}
		},
		check: func(_ *cobra.Command, o options) error { _, err := replyParsers[name](o); return err },
		run:   answerCmd(name)}
}
