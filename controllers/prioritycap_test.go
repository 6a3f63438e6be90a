package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/prioritypolicy"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestPriorityCapRefusedAtApply: in a Namespace annotated
// agentrun.dev/max-priority: "10", kubectl apply of a run asking for
// priority 11, or for a class worth 1000, is refused by the API server
// with the reason; priority 10, a class worth 10, and a run asking for
// none are accepted. A class the ConfigMap does not hold is refused in
// any namespace, naming the classes there are. The API server decides
// (config/admission, installed by testenv), from the classes a manager
// wrote into the priority-class policy; when the policy is re-applied as
// shipped (a GitOps sync), the manager writes them back.
func TestPriorityCapRefusedAtApply(t *testing.T) {
	ctx := context.Background()
	capped := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "capped-", Annotations: map[string]string{arv1.AnnotationMaxPriority: "10"}}}
	if err := k8s.Create(ctx, capped); err != nil {
		t.Fatal(err)
	}
	open := newNamespace(t)
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	apply := func(ns, name, field string) (string, error) {
		path := filepath.Join(dir, name+".yaml")
		doc := fmt.Sprintf("apiVersion: agentrun.dev/v1alpha1\nkind: AgentRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  agent: a\n  task: t\n%s", name, ns, field)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return testenv.Kubectl(kubeconfig, "apply", "-f", path)
	}
	// The ConfigMap as shipped holds no classes: no class name is
	// checked, as with no ConfigMap at all.
	if out, err := apply(open, "unshipped-class", "  priorityClassName: gold\n"); err != nil {
		t.Errorf("with no classes a run naming one was refused: %v\n%s", err, out)
	}
	classes := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: priority.DefaultConfigMapName, Namespace: testenv.SystemNamespace},
		Data: map[string]string{"urgent": "1000", "team": "10", priority.DefaultKey: "team"}}
	if err := k8s.Update(ctx, classes); err != nil {
		t.Fatal(err)
	}
	policies := kubernetes.NewForConfigOrDie(env.Config).AdmissionregistrationV1().ValidatingAdmissionPolicies()
	t.Cleanup(func() {
		// As shipped again, for the tests after this one.
		classes.Data = nil
		_ = k8s.Update(context.Background(), classes)
		_, _ = prioritypolicy.Sync(context.Background(), policies, "priority-class", prioritypolicy.Expressions(priority.Classes{}, ""))
	})
	// A manager (driving only a namespace of its own) writes the classes
	// into the policy; wait until an unknown class is refused.
	startManagerWith(t, manager.Options{Namespaces: []string{newNamespace(t)},
		PriorityClasses: types.NamespacedName{Namespace: testenv.SystemNamespace, Name: priority.DefaultConfigMapName},
		PriorityPolicy:  "priority-class"})
	refusesUnknown := func(what string) {
		t.Helper()
		for i := 0; ; i++ {
			if _, err := apply(open, fmt.Sprintf("probe-%s-%d", what, i), "  priorityClassName: gold\n"); err != nil {
				return
			}
			if i == 200 {
				t.Fatalf("%s: the priority-class policy never refused an unknown class", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	refusesUnknown("written")
	for _, tc := range []struct {
		ns, name, field string
		refusal         string // empty: accepted
	}{
		{capped.Name, "too-high", "  priority: 11\n", "spec.priority 11 is above 10, the most namespace " + capped.Name + " allows"},
		{capped.Name, "at-cap", "  priority: 10\n", ""},
		{capped.Name, "class-too-high", "  priorityClassName: urgent\n", "spec.priorityClassName urgent has priority 1000, above 10, the most namespace " + capped.Name + " allows"},
		{capped.Name, "class-at-cap", "  priorityClassName: team\n", ""},
		{capped.Name, "asks-none", "", ""},
		{open, "no-cap", "  priority: 100000\n", ""},
		{open, "open-class", "  priorityClassName: urgent\n", ""},
		{open, "unknown-class", "  priorityClassName: gold\n", "spec.priorityClassName gold is not a priority class of ConfigMap agentrun-system/agentrun-priority-classes (classes: "},
		{open, "both", "  priority: 1\n  priorityClassName: team\n", "set priority or priorityClassName, not both"},
	} {
		out, err := apply(tc.ns, tc.name, tc.field)
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s/%s was refused: %v", tc.ns, tc.name, err)
		case tc.refusal != "" && err == nil:
			t.Errorf("%s/%s was accepted (%s), want refused with %q", tc.ns, tc.name, strings.TrimSpace(out), tc.refusal)
		case tc.refusal != "" && !strings.Contains(out, tc.refusal):
			t.Errorf("%s/%s refused with\n%s\nwant the reason %q", tc.ns, tc.name, out, tc.refusal)
		}
	}

	// The policy re-applied as shipped (no classes) is written over.
	shipped, err := policies.Get(ctx, "priority-class", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prioritypolicy.Apply(shipped, prioritypolicy.Expressions(priority.Classes{}, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Update(ctx, shipped, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := prioritypolicy.Expressions(mustParse(t, classes.Data), testenv.SystemNamespace+"/"+priority.DefaultConfigMapName)
	holds := func() bool {
		p, err := policies.Get(ctx, "priority-class", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		changed, err := prioritypolicy.Apply(p, want)
		return err == nil && !changed
	}
	for i := 0; !holds(); i++ {
		if i == 100 {
			t.Fatalf("the manager never wrote the classes back into the re-applied policy (want %v)", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	refusesUnknown("re-applied")

	// An edit that does not parse leaves the classes in force, in the
	// policy as in the manager: once the manager has refused it (its
	// Warning Event), the policy still holds them and still caps urgent.
	bad := classes.DeepCopy()
	bad.Data["urgent"] = "very"
	if err := k8s.Update(ctx, bad); err != nil {
		t.Fatal(err)
	}
	classes.ResourceVersion = bad.ResourceVersion
	for i := 0; ; i++ {
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(testenv.SystemNamespace), client.MatchingFields{"involvedObject.name": priority.DefaultConfigMapName, "reason": "PriorityClassesInvalid"}); err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			break
		}
		if i == 100 {
			t.Fatal("the manager never reported the classes edit that does not parse")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !holds() {
		t.Errorf("after an edit that does not parse the policy no longer holds the classes in force %v", want)
	}
	if out, err := apply(capped.Name, "class-too-high-after-bad-edit", "  priorityClassName: urgent\n"); err == nil || !strings.Contains(out, "has priority 1000, above 10") {
		t.Errorf("after an edit that does not parse, urgent in %s got %v:\n%s", capped.Name, err, out)
	}

	// A cap that is not a number refuses every run asking for a priority,
	// saying so; a run asking for none is still accepted.
	broken := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "broken-", Annotations: map[string]string{arv1.AnnotationMaxPriority: "high"}}}
	if err := k8s.Create(ctx, broken); err != nil {
		t.Fatal(err)
	}
	if out, err := apply(broken.Name, "asks", "  priority: 1\n"); err == nil || !strings.Contains(out, "has agentrun.dev/max-priority high, not an integer") {
		t.Errorf("under a cap that is not a number a run asking for priority 1 got %v:\n%s", err, out)
	}
	if _, err := apply(broken.Name, "asks-none", ""); err != nil {
		t.Errorf("under a cap that is not a number a run asking for no priority was refused: %v", err)
	}
}

// TestCreatesReadNoConfigMap: with the priority classes ConfigMap shipped
// (testenv installs it as config/default does), the priority-class
// policy finds its parameter in the API server's cache, so AgentRun
// creates cost the API server no read of it. Without the ConfigMap each
// create made the API server GET it (a 404 from etcd); that GET shows in
// its request counter, so 20 creates must move it by fewer than 20.
func TestCreatesReadNoConfigMap(t *testing.T) {
	ns := newNamespace(t)
	before := configMapGets(t)
	for i := range 20 {
		createRun(t, ns, fmt.Sprintf("r%d", i), "nothing")
	}
	if moved := configMapGets(t) - before; moved >= 20 {
		t.Errorf("20 AgentRun creates moved the API server's GET configmaps count by %.0f: each create read the priority classes ConfigMap", moved)
	}
}

// configMapGets is the API server's count of GET configmaps requests, every
// response code.
func configMapGets(t *testing.T) float64 {
	t.Helper()
	body, err := kubernetes.NewForConfigOrDie(env.Config).RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="configmaps"`) ||
			!strings.Contains(line, `verb="GET"`) || !strings.Contains(line, `subresource=""`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += v
	}
	return n
}

func mustParse(t *testing.T, data map[string]string) priority.Classes {
	t.Helper()
	c, err := priority.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
