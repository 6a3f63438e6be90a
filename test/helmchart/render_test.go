package helmchart_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

const (
	releaseName = "agentrun-operator"
	releaseNS   = "agentrun-system"
)

// chartDir is the chart under test.
func chartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "agentrun-operator") }

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir())
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// rendered is one `helm template` of the chart: its templates' objects and
// the CRDs of crds/ (which Helm installs before them).
type rendered struct {
	objs []*unstructured.Unstructured
	crds []*unstructured.Unstructured
}

// renderChart renders the chart as `helm install --dry-run` does on the
// client (the kubeVersion constraint and value checks included), for
// release agentrun-operator in agentrun-system with vals over the defaults.
func renderChart(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	return renderRelease(t, releaseName, releaseNS, vals)
}

// renderRelease renders the chart as renderChart does, for release name in
// namespace ns.
func renderRelease(t *testing.T, name, ns string, vals map[string]any) rendered {
	t.Helper()
	r, err := tryRenderRelease(loadChart(t), name, ns, vals)
	if err != nil {
		t.Fatalf("rendering the chart with %v: %v", vals, err)
	}
	return r
}

func tryRender(c *chart.Chart, vals map[string]any) (rendered, error) {
	return tryRenderRelease(c, releaseName, releaseNS, vals)
}

func tryRenderRelease(c *chart.Chart, name, ns string, vals map[string]any) (rendered, error) {
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = name, ns
	kv, err := chartutil.ParseKubeVersion(testenv.KubeVersion)
	if err != nil {
		return rendered{}, err
	}
	install.KubeVersion = kv
	if vals == nil {
		vals = map[string]any{}
	}
	rel, err := install.Run(c, vals)
	if err != nil {
		return rendered{}, err
	}
	objs, err := decodeAll([]byte(rel.Manifest))
	if err != nil {
		return rendered{}, err
	}
	var crds []*unstructured.Unstructured
	for _, f := range c.CRDObjects() {
		us, err := decodeAll(f.File.Data)
		if err != nil {
			return rendered{}, fmt.Errorf("%s: %w", f.Filename, err)
		}
		crds = append(crds, us...)
	}
	return rendered{objs: objs, crds: crds}, nil
}

func decodeAll(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// kinds lists the objects as "Kind name", for failure messages.
func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, u := range objs {
		out = append(out, u.GetKind()+" "+u.GetName())
	}
	return out
}

// one returns the only object of kind whose name ends with suffix.
func one[T any](t *testing.T, objs []*unstructured.Unstructured, kind, suffix string) *T {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind && strings.HasSuffix(u.GetName(), suffix) {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s named *%s, found %d among %v", kind, suffix, len(found), kinds(objs))
	}
	return convert[T](t, found[0])
}

func count(objs []*unstructured.Unstructured, kind string) int {
	n := 0
	for _, u := range objs {
		if u.GetKind() == kind {
			n++
		}
	}
	return n
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

// kustomize renders a kustomization under config/ with the real kubectl:
// the install the chart must equal.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	if err := testenv.EnsureBinaries(); err != nil { // kubectl, built once from Go modules
		t.Fatal(err)
	}
	out, err := exec.Command(testenv.KubectlPath(), "kustomize", filepath.Join(testenv.RepoRoot(), "config", dir)).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/%s: %v", dir, err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
