package loadtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// Sizes of BenchmarkConfigMapsHeldByAdmission's ConfigMaps.
const (
	heldConfigMaps     = 5000
	heldConfigMapBytes = 8 << 10
)

// BenchmarkConfigMapsHeldByAdmission: what the priority-class admission
// policy costs the API server's memory. Its parameter is a ConfigMap
// (paramKind), and the API server resolves parameters from an informer of
// every ConfigMap of the cluster, journals included. Two control planes in
// turn, one as installed and one without that policy, each given the same
// ConfigMaps (5,000 of 8 KiB); the kube-apiserver's resident size is read
// before them and 20 s after.
func BenchmarkConfigMapsHeldByAdmission(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		data := float64(heldConfigMaps*heldConfigMapBytes) / (1 << 20)
		grew := map[bool]float64{}
		for _, withPolicy := range []bool{true, false} {
			var watches float64
			grew[withPolicy], watches = apiServerGrowth(b, ctx, withPolicy)
			label := "as installed"
			if !withPolicy {
				label = "without the priority-class policy"
			}
			r.row(label, "kube-apiserver VmRSS grew %.0f MiB for %.0f MiB of ConfigMaps (%.1fx); %.0f cluster-wide ConfigMap watches", grew[withPolicy], data, grew[withPolicy]/data, watches)
		}
		r.row("the policy's informer", "%.0f MiB more, %.1fx the ConfigMaps' data", grew[true]-grew[false], (grew[true]-grew[false])/data)
		r.metric(grew[true]-grew[false], "policy_MiB")
		r.metric(data, "configmaps_MiB")
	})
}

// apiServerGrowth starts a control plane (deleting the priority-class
// policy unless withPolicy), creates the ConfigMaps, and returns how many
// MiB the kube-apiserver's resident size grew, and how many cluster-wide
// ConfigMap watches it serves (the policy's informer is one).
func apiServerGrowth(b *testing.B, ctx context.Context, withPolicy bool) (float64, float64) {
	b.Helper()
	c, err := loadtest.StartCluster()
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		// Stopped before the next one starts, which is measured alone.
		if err := c.Stop(); err != nil {
			b.Logf("stopping the control plane: %v", err)
		}
	}()
	if !withPolicy {
		for _, obj := range []client.Object{
			&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "priority-class"}},
			&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "priority-class"}},
		} {
			if err := c.Client.Delete(ctx, obj); err != nil {
				b.Fatal(err)
			}
		}
	}
	ns, err := c.NewNamespace(ctx, "held")
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the API server settles after its start
	before, err := loadtest.APIServerMemory()
	if err != nil {
		b.Fatal(err)
	}
	value := strings.Repeat("x", heldConfigMapBytes)
	if err := loadtest.Parallel(ctx, heldConfigMaps, concurrency, func(ctx context.Context, i int) error {
		return c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"v": value}})
	}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(20 * time.Second)
	after, err := loadtest.APIServerMemory()
	if err != nil {
		b.Fatal(err)
	}
	scrape, err := c.APIServerMetrics(ctx)
	if err != nil {
		b.Fatal(err)
	}
	watches, _ := scrape.Value("apiserver_longrunning_requests", map[string]string{"resource": "configmaps", "scope": "cluster", "verb": "WATCH"})
	if want := map[bool]float64{true: 1, false: 0}[withPolicy]; watches != want {
		// The comparison is only what it says while the policy's informer
		// is the one cluster-wide ConfigMap watch (no manager runs here).
		b.Fatalf("%v cluster-wide ConfigMap watches with the policy installed=%v, want %v", watches, withPolicy, want)
	}
	return loadtest.MiB(after.RSS - before.RSS), watches
}
