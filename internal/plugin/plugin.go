// Package plugin is the kubectl plugin `kubectl agentrun`: a listing of run
// trees that puts runs needing a person first (also as a live watch), a run
// record, the wire run-state, pause/resume/cancel, answers to what a run
// waits on (approve/deny, answer, resolve), a run's output, regions and
// transcript. Its command line is cobra's, and its connection flags are
// kubectl's own (k8s.io/cli-runtime), so every flag a person knows from
// kubectl works here too. The binary in cmd/kubectl-agentrun only calls
// Main.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// requestTimeout is --request-timeout's default: it bounds every request
// and the whole command, so a dead API server fails it instead of hanging
// a terminal (kubectl's own default, 0, waits forever). A watch (ps
// --watch) has no overall bound.
const requestTimeout = 60 * time.Second

// completeHelper is the name kubectl looks for to complete a plugin's
// arguments (`kubectl agentrun <TAB>`): a link to this binary under that
// name answers cobra's __complete protocol.
const completeHelper = "kubectl_complete-agentrun"

// scheme holds every type the plugin reads or writes.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(coordinationv1.AddToScheme(s))
	utilruntime.Must(authenticationv1.AddToScheme(s))
	utilruntime.Must(arv1.AddToScheme(s))
	utilruntime.Must(appsv1.AddToScheme(s))
	utilruntime.Must(admissionv1.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

// app is one invocation: its streams, kubectl's connection flags and the
// pace of --wait. Tests replace now, pollEvery and waitFor.
type app struct {
	stdout, stderr io.Writer
	// stdin is read by approve --args -.
	stdin io.Reader
	now   func() time.Time
	flags *genericclioptions.ConfigFlags
	// pollEvery and waitFor pace --wait.
	pollEvery, waitFor time.Duration
	// cfg is the connection the running command made (ps --watch opens
	// its own watch client from it).
	cfg *rest.Config
	// parsed is the options of the last command parsed, for tests.
	parsed *options
}

func newApp(stdout, stderr io.Writer) *app {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: stdout, ErrOut: stderr}
	flags := genericclioptions.NewConfigFlags(true).WithWarningPrinter(streams)
	timeout := requestTimeout.String()
	flags.Timeout = &timeout
	return &app{stdout: stdout, stderr: stderr, stdin: os.Stdin, now: time.Now, pollEvery: answerPollEvery, waitFor: answerWaitFor, flags: flags}
}

// Main runs the plugin with args as os.Args (args[0] is the program name)
// and returns the exit code: 0 ok, 1 error (message on stderr), 2 usage.
// Called as kubectl_complete-agentrun, it answers shell completion.
func Main(args []string, stdout, stderr io.Writer) int {
	logf.SetLogger(logr.Discard())
	argv := args[1:]
	if filepath.Base(args[0]) == completeHelper {
		argv = append([]string{cobra.ShellCompRequestCmd}, argv...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return newApp(stdout, stderr).execute(ctx, argv)
}

// usageError is a mistake in how the plugin was called: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// runError is a command that was called right but failed: exit code 1.
// Everything else cobra returns (unknown commands and flags, bad values,
// wrong arguments) is a usage error.
type runError struct{ err error }

func (e *runError) Error() string { return e.err.Error() }
func (e *runError) Unwrap() error { return e.err }

func (a *app) execute(ctx context.Context, args []string) int {
	root := a.rootCommand()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var failed *runError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errRejected), errors.Is(err, errEditDenied), errors.Is(err, errFix): // the verdict is printed already
		return ExitError
	case errors.As(err, &failed):
		fmt.Fprintf(a.stderr, "error: %v\n", explain(failed.err))
		return ExitError
	}
	fmt.Fprintf(a.stderr, "error: %v\n\n%s", err, cmd.UsageString())
	return ExitUsage
}

// explain turns API errors a person can act on into sentences.
func explain(err error) error {
	switch {
	case meta.IsNoMatchError(err):
		return fmt.Errorf("the AgentRun API (%s) is not installed in this cluster: %w", arv1.GroupVersion, err)
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err) && bareStatus(err):
		// A refusal that names no user or resource: discovery refused to
		// an anonymous or unknown caller.
		return fmt.Errorf("the API server did not accept the credentials (%s; check --token, --user, --as or the kubeconfig): %w",
			apierrors.ReasonForError(err), err)
	}
	return err
}

// bareStatus: the API error says nothing beyond its code.
func bareStatus(err error) bool {
	var se *apierrors.StatusError
	return errors.As(err, &se) && (se.ErrStatus.Message == "" || se.ErrStatus.Message == "unknown")
}

// restConfig is the connection kubectl would make with the same flags:
// $KUBECONFIG or ~/.kube/config, overridden by --kubeconfig, --context,
// --cluster, --user, --server, --token, --as, --request-timeout and the
// rest.
func (a *app) restConfig() (*rest.Config, error) {
	cfg, err := a.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kubectl-agentrun"
	return cfg, nil
}

// connect returns a client for the cluster cfg reaches and the namespace
// to use (-n, else the context's, else "default").
func (a *app) connect(cfg *rest.Config) (client.Client, string, error) {
	ns, _, err := a.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, ns, nil
}

// defaultLeaseNamespace is where the kustomize base runs the operator.
const defaultLeaseNamespace = arv1.DefaultSystemNamespace

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

// ReadPriorityClasses reads the priority classes the manager lines runs
// up by: its ConfigMap (priority.DefaultConfigMapName) in the operator's
// namespace (namespace; "" for the default), parsed as the manager parses
// it. A missing ConfigMap is no classes, for the manager too. One that
// cannot be read (no access to that namespace, say) or parsed leaves
// none, and the error says why. ps and the web console call it.
func ReadPriorityClasses(ctx context.Context, c client.Client, namespace string) (priority.Classes, error) {
	if namespace == "" {
		namespace = defaultLeaseNamespace
	}
	var cm corev1.ConfigMap
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: priority.DefaultConfigMapName}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return priority.Classes{}, nil
	case err != nil:
		return priority.Classes{}, fmt.Errorf("the priority classes (ConfigMap %s/%s) could not be read: %w", namespace, priority.DefaultConfigMapName, err)
	}
	classes, err := priority.Parse(cm.Data)
	if err != nil {
		return priority.Classes{}, fmt.Errorf("the priority classes (ConfigMap %s/%s) do not parse: %w", namespace, priority.DefaultConfigMapName, err)
	}
	return classes, nil
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
