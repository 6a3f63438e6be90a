package testenv_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(arv1.AddToScheme(scheme))
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestGarbageCollectorDeletesWhatARunOwns: deleting an AgentRun (a custom
// resource, as the operator's owners are) in the background takes the
// ConfigMap and the child run it owns, as a cluster's garbage collector
// does.
func TestGarbageCollectorDeletesWhatARunOwns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	owner := createRun(t, ns, "owner", nil)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner-journal", Namespace: ns, OwnerReferences: []metav1.OwnerReference{owner.OwnerReference()}}}
	if err := k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	child := createRun(t, ns, "owner-w0", owner)
	if err := k8s.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, cm, 30*time.Second)
	waitGone(t, child, 30*time.Second)
}

// TestGarbageCollectorForeground: a foreground deletion keeps the owner,
// marked with the foregroundDeletion finalizer, until the collector has
// deleted what blocks it (blockOwnerDeletion), then deletes it too.
func TestGarbageCollectorForeground(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	owner := createRun(t, ns, "owner", nil)
	child := createRun(t, ns, "owner-c0", owner)
	// A finalizer of the test's holds the child, so the owner is seen
	// waiting on it.
	patch := client.MergeFrom(child.DeepCopy())
	child.Finalizers = []string{"agentrun.dev/test-hold"}
	if err := k8s.Patch(ctx, child, patch); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, owner, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the child marked deleted by the collector", func() (bool, string) {
		got := &arv1.AgentRun{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(child), got); err != nil {
			return false, err.Error()
		}
		return got.DeletionTimestamp != nil, "no deletionTimestamp"
	})
	got := &arv1.AgentRun{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(owner), got); err != nil {
		t.Fatalf("the owner went before its blocking child: %v", err)
	}
	if got.DeletionTimestamp == nil || !slices.Contains(got.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("owner deletionTimestamp %v, finalizers %v: want it waiting on %s", got.DeletionTimestamp, got.Finalizers, metav1.FinalizerDeleteDependents)
	}
	patch = client.MergeFrom(child.DeepCopy())
	child.Finalizers = nil
	if err := k8s.Patch(ctx, child, patch); err != nil {
		t.Fatal(err)
	}
	waitGone(t, child, 30*time.Second)
	waitGone(t, owner, 30*time.Second)
}

// TestNamespaceDeletionCompletes: a deleted namespace is emptied, custom
// resources included, and goes, as in a cluster (the namespace
// controller).
func TestNamespaceDeletionCompletes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	createRun(t, ns, "left-behind", nil)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "left-behind", Namespace: ns}}
	if err := k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := k8s.Delete(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	waitGone(t, nsObj, 60*time.Second)
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// createRun creates a run, owned by owner unless nil.
func createRun(t *testing.T, ns, name string, owner *arv1.AgentRun) *arv1.AgentRun {
	t.Helper()
	run := &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       arv1.AgentRunSpec{Agent: "code-reviewer", Task: "Review the open pull request."},
	}
	if owner != nil {
		run.OwnerReferences = []metav1.OwnerReference{owner.OwnerReference()}
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

// waitGone waits until obj is not found.
func waitGone(t *testing.T, obj client.Object, timeout time.Duration) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	probe, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		t.Fatalf("%T is not a client.Object", obj)
	}
	eventually(t, timeout, fmt.Sprintf("%T %s gone", obj, key), func() (bool, string) {
		err := k8s.Get(context.Background(), key, probe)
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
