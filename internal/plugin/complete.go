package plugin

import (
	"context"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// Shell completion: cobra's __complete protocol, answered from the cluster
// the command line's own flags (-n, --context, --kubeconfig, ...) reach.

// completeTimeout bounds a completion, so a TAB never hangs a shell.
const completeTimeout = 10 * time.Second

// completeRuns completes the first n arguments with the names of the runs
// in the namespace, each described by its phase and what it waits on.
func (a *app) completeRuns(n int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ns, cancel, err := a.completionClient(cmd)
		if err != nil {
			cobra.CompErrorln(err.Error())
			return nil, cobra.ShellCompDirectiveError
		}
		defer cancel()
		var list arv1.AgentRunList
		if err := c.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
			cobra.CompErrorln(err.Error())
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for i := range list.Items {
			run := &list.Items[i]
			if strings.HasPrefix(run.Name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(run.Name, runSummary(run)))
			}
		}
		sort.Strings(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// runSummary is a run's phase and, when parked, what it waits on.
func runSummary(run *arv1.AgentRun) string {
	phase := string(run.Status.Phase)
	if phase == "" {
		phase = "not started"
	}
	if w := run.Status.WaitingOn; w != nil {
		s := w.Summary
		if s == "" {
			s = string(w.Reason)
		}
		return phase + ": " + s
	}
	return phase
}

// registerFlagCompletions completes -n with the cluster's namespaces and
// --context, --cluster and --user with the kubeconfig's names.
func (a *app) registerFlagCompletions(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("namespace", a.completeNamespaces)
	kubeconfigNames := func(names func(contexts, clusters, users []string) []string) cobra.CompletionFunc {
		return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			raw, err := a.flags.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			var contexts, clusters, users []string
			for n := range raw.Contexts {
				contexts = append(contexts, n)
			}
			for n := range raw.Clusters {
				clusters = append(clusters, n)
			}
			for n := range raw.AuthInfos {
				users = append(users, n)
			}
			out := names(contexts, clusters, users)
			sort.Strings(out)
			return out, cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = root.RegisterFlagCompletionFunc("context", kubeconfigNames(func(c, _, _ []string) []string { return c }))
	_ = root.RegisterFlagCompletionFunc("cluster", kubeconfigNames(func(_, c, _ []string) []string { return c }))
	_ = root.RegisterFlagCompletionFunc("user", kubeconfigNames(func(_, _, u []string) []string { return u }))
}

// completeNamespaces completes a namespace flag (-n, --lease-namespace,
// --operator-namespace) with the cluster's namespaces.
func (a *app) completeNamespaces(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, _, cancel, err := a.completionClient(cmd)
	if err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveError
	}
	defer cancel()
	var list corev1.NamespaceList
	if err := c.List(cmd.Context(), &list); err != nil {
		cobra.CompErrorln(err.Error())
		return nil, cobra.ShellCompDirectiveError
	}
	var out []cobra.Completion
	for _, ns := range list.Items {
		if strings.HasPrefix(ns.Name, toComplete) {
			out = append(out, ns.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completionClient connects as the command line being completed would,
// with the completion's own short deadline.
func (a *app) completionClient(cmd *cobra.Command) (client.Client, string, context.CancelFunc, error) {
	cfg, err := a.restConfig()
	if err != nil {
		return nil, "", nil, err
	}
	if cfg.Timeout == 0 || cfg.Timeout > completeTimeout {
		cfg.Timeout = completeTimeout
	}
	c, ns, err := a.connect(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, completeTimeout)
	cmd.SetContext(ctx)
	return c, ns, cancel, nil
}
