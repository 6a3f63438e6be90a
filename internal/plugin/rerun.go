package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// rerunOptions are rerun's and fork's own flags.
type rerunOptions struct {
	name      string // --name
	fromStage string // --from-stage (fork)
	fromEntry *int64 // --from-entry (fork): nil until given
	agent     string // --agent (fork)
	blueprint string // --blueprint (fork)
	model     string // --model (fork)
}

func rerunSpecs() []spec {
	return []spec{
		{use: "rerun NAME", short: "Start a new run with the same spec as NAME", group: groupSteer, runNames: 1,
			long: `Create a new AgentRun with NAME's spec (task, agent, model, budgets, ...;
never its pause or cancel), its labels and annotations, linked to NAME by
the label agentrun.dev/rerun-of and, once the controller takes it up, by
status.origin {kind: Rerun, run, uid}. The new run starts from nothing:
every call is made again. To keep what NAME already did, fork it.`,
			example: `  kubectl agentrun rerun review-pr
  kubectl agentrun rerun review-pr --name review-pr-again`,
			flags: func(fs *pflag.FlagSet, o *options) {
				fs.StringVar(&o.rerun.name, "name", "", "the new run's name (default: NAME-rerun-<random>)")
			},
			run: (*app).rerun},
		{use: "fork NAME (--from-stage STAGE | --from-entry N)", short: "Start a run from another run's journal, not paying again for what it did", group: groupSteer, runNames: 1,
			long: `Create a new AgentRun that starts with a copy of NAME's journal up to the
start of STAGE (the first time NAME entered it), or up to journal entry N
(kubectl agentrun transcript NAME numbers them), and goes on from there
(spec.forkOf). The calls before the cut are not made or billed again; their
usage shows apart, in status.inheritedUsage. NAME is only read, never
changed, and may still be running if it has already passed the cut. A cut
past the end of NAME's journal is refused before anything is created; a
journal in the database (status.journalStore Database) is read through the
history API (history.agentrun.dev) as you.

The fork reads its blueprint afresh, so a fixed blueprint applies: edit
NAME's blueprint ConfigMap first, or give --agent CONFIGMAP, or --blueprint
FILE|DIR (made into the ConfigMap <fork>-blueprint, deleted with the fork).
--model overrides the model of every stage. Its earlier stages must still
lead where NAME went, or the fork ends in Error saying so.`,
			example: `  kubectl agentrun fork review-pr --from-stage publish
  kubectl agentrun fork review-pr --from-stage publish --blueprint ./fixed-agent/
  kubectl agentrun fork review-pr --from-entry 12 --model oa/gpt-x`,
			flags: func(fs *pflag.FlagSet, o *options) {
				fs.StringVar(&o.rerun.name, "name", "", "the new run's name (default: NAME-fork-<random>)")
				fs.StringVar(&o.rerun.fromStage, "from-stage", "", "start at this stage of NAME's blueprint, inheriting everything before NAME entered it")
				fs.Var(int64Value{&o.rerun.fromEntry}, "from-entry", "inherit NAME's journal entries 0 to N-1")
				fs.StringVar(&o.rerun.agent, "agent", "", "the fork's blueprint ConfigMap (default: NAME's spec.agent)")
				fs.StringVar(&o.rerun.blueprint, "blueprint", "", "make the fork's blueprint ConfigMap from this agent.toml file or agent directory")
				fs.StringVar(&o.rerun.model, "model", "", "the fork's spec.model (provider/model or a model name)")
			},
			check: forkArgs, run: (*app).fork},
	}
}

// int64Value is a flag whose value is nil until given.
type int64Value struct{ p **int64 }

func (v int64Value) String() string {
	if *v.p == nil {
		return ""
	}
	return strconv.FormatInt(**v.p, 10)
}

func (v int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not a whole number: %q", s)
	}
	*v.p = &n
	return nil
}

func (v int64Value) Type() string { return "int" }

// forkArgs: one NAME, exactly one cut, at most one blueprint source.
func forkArgs(cmd *cobra.Command, o options) error {
	if err := oneName(cmd.Name(), o); err != nil {
		return err
	}
	entry := o.rerun.fromEntry
	switch {
	case (o.rerun.fromStage != "") == (entry != nil):
		return usagef("fork needs exactly one of --from-stage and --from-entry")
	case entry != nil && *entry < 0:
		return usagef("--from-entry must be 0 or more, got %d", *entry)
	case o.rerun.agent != "" && o.rerun.blueprint != "":
		return usagef("--agent and --blueprint cannot be used together")
	}
	return nil
}

// copyOf is a new run with src's spec, user labels and annotations.
func copyOf(src *arv1.AgentRun, name string) *arv1.AgentRun {
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: src.Namespace, Labels: userKeys(src.Labels), Annotations: userKeys(src.Annotations),
	}}
	run.Spec = *src.Spec.DeepCopy()
	run.Spec.Paused, run.Spec.Cancel = false, false
	return run
}

// userKeys are the labels or annotations a person set: not the
// operator's (agentrun.dev/) nor kubectl's bookkeeping.
func userKeys(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !strings.HasPrefix(k, "agentrun.dev/") && !strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}

// newName is --name, else src's name with a suffix and random letters.
func newName(given, src, suffix string) string {
	if given != "" {
		return given
	}
	base := src
	if n := validation.DNS1123SubdomainMaxLength - len(suffix) - 7; len(base) > n {
		base = base[:n]
	}
	return base + "-" + suffix + "-" + rand.String(5)
}

// linkTo labels run as made from src (label values are at most 63
// characters: a longer name is only in the annotation).
func linkTo(run *arv1.AgentRun, label string, src *arv1.AgentRun) {
	if len(validation.IsValidLabelValue(src.Name)) == 0 {
		run.Labels[label] = src.Name
	}
}

func (a *app) rerun(ctx context.Context, c client.Client, ns string, o options) error {
	src, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	run := copyOf(src, newName(o.rerun.name, src.Name, "rerun"))
	linkTo(run, arv1.LabelRerunOf, src)
	run.Annotations[arv1.LabelRerunOf] = src.Name
	run.Annotations[arv1.AnnotationRerunOfUID] = string(src.UID)
	if err := c.Create(ctx, run); err != nil {
		return fmt.Errorf("creating the rerun of %s: %w", src.Name, err)
	}
	fmt.Fprintf(a.stdout, "agentrun.%s/%s created (rerun of %s)\n", arv1.GroupVersion.Group, run.Name, src.Name)
	return nil
}

func (a *app) fork(ctx context.Context, c client.Client, ns string, o options) error {
	src, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	ro := o.rerun
	if err := forkable(ctx, c, a.cfg, src, ro); err != nil {
		return err
	}
	run := copyOf(src, newName(ro.name, src.Name, "fork"))
	linkTo(run, arv1.LabelForkOf, src)
	run.Spec.ForkOf = &arv1.ForkSource{Run: src.Name, Stage: ro.fromStage, Entry: ro.fromEntry}
	if ro.model != "" {
		run.Spec.Model = ro.model
	}
	if ro.agent != "" {
		run.Spec.Agent = ro.agent
	}
	var cm *corev1.ConfigMap
	if ro.blueprint != "" {
		if cm, err = blueprintConfigMap(ro.blueprint, ns, run.Name+"-blueprint"); err != nil {
			return err
		}
		if err := c.Create(ctx, cm); err != nil {
			return fmt.Errorf("creating the fork's blueprint ConfigMap: %w", err)
		}
		run.Spec.Agent = cm.Name
	}
	if err := c.Create(ctx, run); err != nil {
		return fmt.Errorf("creating the fork of %s: %w", src.Name, err)
	}
	if cm != nil {
		// Owned by the fork (not its controller), so it goes with it.
		patch := client.MergeFrom(cm.DeepCopy())
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: arv1.GroupVersion.String(), Kind: "AgentRun", Name: run.Name, UID: run.UID}}
		if err := c.Patch(ctx, cm, patch); err != nil {
			return fmt.Errorf("making the fork own its blueprint ConfigMap %s: %w", cm.Name, err)
		}
	}
	from := fmt.Sprintf("stage %s", ro.fromStage)
	if ro.fromEntry != nil {
		from = fmt.Sprintf("entry %d", *ro.fromEntry)
	}
	fmt.Fprintf(a.stdout, "agentrun.%s/%s created (fork of %s from %s)\n", arv1.GroupVersion.Group, run.Name, src.Name, from)
	return nil
}

// forkable refuses, before anything is created, a cut the controller
// would refuse: a stage the source's blueprint lacks or the source never
// entered, an entry past the end of its journal (read wherever it is
// kept: RunJournal).
func forkable(ctx context.Context, c client.Client, cfg *rest.Config, src *arv1.AgentRun, ro rerunOptions) error {
	if ro.fromEntry != nil {
		entries, err := RunJournal(ctx, c, cfg, src)
		if err != nil {
			return fmt.Errorf("reading the journal of %s: %w", src.Name, err)
		}
		if n := *ro.fromEntry; n > int64(len(entries)) {
			return fmt.Errorf("entry %d is out of range: the journal of %s holds %d entries", n, src.Name, len(entries))
		}
		return nil
	}
	var names []string
	for _, s := range src.Status.Stages {
		if s.Name != ro.fromStage {
			names = append(names, s.Name)
			continue
		}
		if s.Visits == 0 {
			return fmt.Errorf("%s has not entered stage %q, so there is nothing to fork from there", src.Name, ro.fromStage)
		}
		return nil
	}
	if len(names) == 0 {
		return fmt.Errorf("%s has not started, so it has no stage %q to fork from", src.Name, ro.fromStage)
	}
	return fmt.Errorf("stage %q is not a stage of %s's blueprint (stages: %s)", ro.fromStage, src.Name, strings.Join(names, ", "))
}

// blueprintConfigMap reads an agent.toml file, or every regular file of
// an agent directory (as kubectl create configmap --from-file=DIR does).
func blueprintConfigMap(path, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{}}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--blueprint: %w", err)
	}
	if !info.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--blueprint: %w", err)
		}
		cm.Data["agent.toml"] = string(b)
		return cm, nil
	}
	files, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("--blueprint: %w", err)
	}
	for _, f := range files {
		if !f.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(path, f.Name()))
		if err != nil {
			return nil, fmt.Errorf("--blueprint: %w", err)
		}
		cm.Data[f.Name()] = string(b)
	}
	if _, ok := cm.Data["agent.toml"]; !ok {
		return nil, fmt.Errorf("--blueprint: the directory %s has no agent.toml", path)
	}
	return cm, nil
}
