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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// Sizes of BenchmarkConfigMapsHeldByAdmission's ConfigMaps.
const (
	heldConfigMaps     = 5000
	heldConfigMapBytes = 8 << 10
)

// BenchmarkConfigMapsHeldByAdmission: what the install's admission
// policies cost the API server's memory per ConfigMap of the cluster. A
// policy whose parameter is a ConfigMap (paramKind) makes the API server
// resolve parameters from an informer of every ConfigMap, journals
// included; the priority-class policy had one until the manager wrote the
// classes into the policy itself (internal/prioritypolicy). Two control
// planes in turn, one as installed and one with such a policy added (the
// former priority-class policy's parameter), each given the same
// ConfigMaps (5,000 of 8 KiB); the kube-apiserver's resident size is read
// before them and 20 s after. It fails unless the install holds no
// cluster-wide ConfigMap watch.
func BenchmarkConfigMapsHeldByAdmission(b *testing.B) {
	scenario(b, func(b *testing.B, ctx context.Context, r *report) {
		data := float64(heldConfigMaps*heldConfigMapBytes) / (1 << 20)
		grew := map[bool]float64{}
		for _, withParam := range []bool{false, true} {
			var watches float64
			grew[withParam], watches = apiServerGrowth(b, ctx, withParam)
			label := "as installed"
			if withParam {
				label = "with a ConfigMap-parameter policy"
			}
			r.row(label, "kube-apiserver VmRSS grew %.0f MiB for %.0f MiB of ConfigMaps (%.1fx); %.0f cluster-wide ConfigMap watches", grew[withParam], data, grew[withParam]/data, watches)
		}
		r.row("a ConfigMap parameter's informer", "%.0f MiB more, %.1fx the ConfigMaps' data: what the install no longer costs", grew[true]-grew[false], (grew[true]-grew[false])/data)
		r.metric(grew[false], "installed_MiB")
		r.metric(grew[true]-grew[false], "configmap_param_MiB")
		r.metric(data, "configmaps_MiB")
	})
}

// apiServerGrowth starts a control plane as installed (adding a
// ConfigMap-parameter policy if withParam), creates the ConfigMaps, and
// returns how many MiB the kube-apiserver's resident size grew, and how
// many cluster-wide ConfigMap watches it serves (such a policy's informer
// is one).
func apiServerGrowth(b *testing.B, ctx context.Context, withParam bool) (float64, float64) {
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
	if withParam {
		if err := addConfigMapParamPolicy(ctx, c.Client); err != nil {
			b.Fatal(err)
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
	if want := map[bool]float64{true: 1, false: 0}[withParam]; watches != want {
		// No manager runs here: a cluster-wide ConfigMap watch is an
		// admission policy's parameter informer.
		b.Fatalf("%v cluster-wide ConfigMap watches with a ConfigMap-parameter policy added=%v, want %v", watches, withParam, want)
	}
	return loadtest.MiB(after.RSS - before.RSS), watches
}

// addConfigMapParamPolicy adds a policy checking AgentRun creates against
// a ConfigMap parameter, as the priority-class policy once did.
func addConfigMapParamPolicy(ctx context.Context, c client.Client) error {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-param"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			ParamKind: &admissionv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule: admissionv1.Rule{APIGroups: []string{"agentrun.dev"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"agentruns"}}},
			}}},
			Validations: []admissionv1.Validation{{Expression: "!has(object.spec.priorityClassName) || (has(params.data) && object.spec.priorityClassName in params.data)"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-param"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "configmap-param",
			ParamRef: &admissionv1.ParamRef{Name: priority.DefaultConfigMapName, Namespace: testenv.SystemNamespace,
				ParameterNotFoundAction: ptr.To(admissionv1.AllowAction)},
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if err := c.Create(ctx, policy); err != nil {
		return err
	}
	return c.Create(ctx, binding)
}
