package v1alpha1_test

// One real control plane (kube-apiserver + etcd from bin/k8s, with the CRDs
// from config/crd/bases installed) serves every test in this package. The
// pure unit tests in helpers_test.go do not touch it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var (
	scheme     = runtime.NewScheme()
	env        *testenv.Env
	k8sClient  client.Client
	kubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	logf.SetLogger(logr.Discard())
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(arv1.AddToScheme(scheme))

	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the test control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the test control plane: %v\n", err)
		}
	}()

	k8sClient, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the client: %v\n", err)
		return 1
	}

	dir, err := os.MkdirTemp("", "agentrun-api-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig, err = env.Kubeconfig(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "writing a kubeconfig: %v\n", err)
		return 1
	}

	return m.Run()
}

// testCtx is a per-test context bounded so a hung API call fails the test
// instead of the whole binary.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newNamespace creates a fresh namespace for one test, so tests stay
// independent.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "artest-"}}
	if err := k8sClient.Create(testCtx(t), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// validSpec is a minimal spec the API server accepts.
func validSpec() arv1.AgentRunSpec {
	return arv1.AgentRunSpec{
		Agent: "code-reviewer",
		Task:  "Review the open pull request.",
	}
}

func newRun(ns, name string, spec arv1.AgentRunSpec) *arv1.AgentRun {
	return &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       spec,
	}
}

// createRun creates an AgentRun and fails the test if the API server refuses.
func createRun(t *testing.T, ns, name string, spec arv1.AgentRunSpec) *arv1.AgentRun {
	t.Helper()
	run := newRun(ns, name, spec)
	if err := k8sClient.Create(testCtx(t), run); err != nil {
		t.Fatalf("creating AgentRun %s/%s: %v", ns, name, err)
	}
	return run
}

// causes returns the field causes of an API status error.
func causes(err error) []metav1.StatusCause {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return nil
	}
	return se.Status().Details.Causes
}

// requireInvalid asserts err is an Invalid (422) error with a cause on
// exactly field whose message contains msg, and that both appear in the
// error text a user sees.
func requireInvalid(t *testing.T, err error, field, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the API server accepted the object; want Invalid on %s: %q", field, msg)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v (reason %q); want an Invalid error on %s: %q", err, apierrors.ReasonForError(err), field, msg)
	}
	found := false
	for _, c := range causes(err) {
		if c.Field == field && strings.Contains(c.Message, msg) {
			found = true
			break
		}
	}
	if !found {
		t.Fatalf("no cause with field %q and message containing %q; causes: %s\nerror: %v",
			field, msg, mustJSON(causes(err)), err)
	}
	if text := err.Error(); !strings.Contains(text, field+": ") || !strings.Contains(text, msg) {
		t.Fatalf("error text %q does not name %q and %q", text, field, msg)
	}
}

func mustJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }
