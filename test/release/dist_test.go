package release_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestSBOMNamesWhatTheImageHolds: the SBOM beside each image is CycloneDX
// about the image (a container named agentrun-operator at the release's
// version and platform): /manager and /kubectl-agentrun as applications
// built for that platform, each depending on the Go modules it links, at
// the versions go.mod requires (client-go and controller-runtime checked),
// the Go standard library at the toolchain's version, and the CA bundle
// with its sha256 and its Debian package.
func TestSBOMNamesWhatTheImageHolds(t *testing.T) {
	built(t)
	want := map[string]string{}
	for _, m := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", m)
		cmd.Dir = testenv.RepoRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		want[m] = strings.TrimSpace(string(out))
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	want["std"] = strings.TrimSpace(string(goVersion))
	caSum := sha256Hex(debianBundle(t))
	for _, platform := range imagePlatforms {
		path := filepath.Join(dist, "image", "agentrun-operator_"+version(t)+"_"+strings.ReplaceAll(platform, "/", "_")+".cdx.json")
		var bom struct {
			BOMFormat, SpecVersion string
			Metadata               struct {
				Component struct {
					Type, Name, Version string
					Ref                 string `json:"bom-ref"`
				}
			}
			Components []struct {
				Ref                 string `json:"bom-ref"`
				Type, Name, Version string
				PURL                string `json:"purl"`
				Hashes              []struct{ Alg, Content string }
				Properties          []struct{ Name, Value string }
			}
			Dependencies []struct {
				Ref       string
				DependsOn []string
			}
		}
		if err := json.Unmarshal(read(t, path), &bom); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		mc := bom.Metadata.Component
		if bom.BOMFormat != "CycloneDX" || mc.Type != "container" || mc.Name != "agentrun-operator" || mc.Version != version(t) {
			t.Errorf("%s: %s %s about %+v", platform, bom.BOMFormat, bom.SpecVersion, mc)
		}
		deps := map[string][]string{}
		for _, d := range bom.Dependencies {
			deps[d.Ref] = d.DependsOn
		}
		versions := map[string]string{}
		var apps []string
		caOK := false
		for _, c := range bom.Components {
			versions[c.Name] = c.Version
			switch c.Type {
			case "application":
				apps = append(apps, c.Name)
				arch := ""
				for _, p := range c.Properties {
					if p.Name == "cdx:gomod:build:env:GOARCH" {
						arch = p.Value
					}
				}
				if "linux/"+arch != platform || len(deps[c.Ref]) < 50 || !slices.Contains(deps[mc.Ref], c.Ref) {
					t.Errorf("%s: %s built for %q depends on %d modules (the image on %v)", platform, c.Name, arch, len(deps[c.Ref]), deps[mc.Ref])
				}
			case "file":
				caOK = c.Name == "/etc/ssl/certs/ca-certificates.crt" && len(c.Hashes) == 1 && c.Hashes[0].Content == caSum &&
					strings.HasPrefix(c.PURL, "pkg:deb/debian/ca-certificates@") && slices.Contains(deps[mc.Ref], c.Ref)
			}
		}
		slices.Sort(apps)
		if !slices.Equal(apps, []string{"/kubectl-agentrun", "/manager"}) || !caOK {
			t.Errorf("%s: applications %v, CA bundle component as expected: %v", platform, apps, caOK)
		}
		for m, v := range want {
			if versions[m] != v {
				t.Errorf("%s: the SBOM has %s at %q, want %s", platform, m, versions[m], v)
			}
		}
	}
}

// packagedChart is the chart make release packaged.
func packagedChart(t *testing.T) (string, *chart.Chart) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dist, "agentrun-operator-*.tgz"))
	if len(matches) != 1 {
		t.Fatalf("make release packaged %v", matches)
	}
	c, err := loader.Load(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	return matches[0], c
}

// TestChartPinsTheImageByDigest: the packaged chart is the chart of the
// repository (every file Helm would package, the same metadata) but for its
// values.yaml, whose image.digest is the image index's digest; rendered,
// the manager's Deployment and the console's run repository:tag@digest;
// `helm lint --strict` passes on the package with no warning.
func TestChartPinsTheImageByDigest(t *testing.T) {
	built(t)
	path, pkg := packagedChart(t)
	if filepath.Base(path) != "agentrun-operator-"+pkg.Metadata.Version+".tgz" {
		t.Errorf("the package is named %s", filepath.Base(path))
	}
	src, err := loader.Load(filepath.Join(testenv.RepoRoot(), "charts", "agentrun-operator"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pkg.Metadata, src.Metadata) {
		t.Errorf("the package's Chart.yaml differs: %+v", pkg.Metadata)
	}
	names := func(c *chart.Chart) (out []string) {
		for _, f := range c.Raw {
			out = append(out, f.Name)
		}
		slices.Sort(out)
		return out
	}
	if a, b := names(pkg), names(src); !slices.Equal(a, b) {
		t.Errorf("the package holds %v, Helm loads %v from the chart", a, b)
	}
	srcFiles := map[string][]byte{}
	for _, f := range src.Raw {
		srcFiles[f.Name] = f.Data
	}
	for _, f := range pkg.Raw {
		if f.Name != "values.yaml" && !bytes.Equal(f.Data, srcFiles[f.Name]) {
			t.Errorf("%s differs from the chart's", f.Name)
		}
	}
	digest := digestOf(t, index(t, dist)).String()
	image, _ := pkg.Values["image"].(map[string]any)
	if image["digest"] != digest || image["repository"] != imageRepo {
		t.Errorf("the package's image values %v, want digest %s", image, digest)
	}
	// Apart from the digest, the values are the chart's.
	image["digest"] = ""
	if !reflect.DeepEqual(pkg.Values, src.Values) {
		t.Error("the package's values differ from the chart's beyond image.digest")
	}
	image["digest"] = digest

	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "agentrun-operator", "agentrun-system"
	kv, err := chartutil.ParseKubeVersion(testenv.KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	rel, err := install.Run(pkg, map[string]any{"console": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	pinned := imageRepo + ":" + version(t) + "@" + digest
	deployments := 0
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var obj struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct{ Containers []struct{ Image string } }
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Deployment" {
			continue
		}
		deployments++
		for _, c := range obj.Spec.Template.Spec.Containers {
			if c.Image != pinned {
				t.Errorf("a Deployment runs %s, want %s", c.Image, pinned)
			}
		}
	}
	if deployments != 2 {
		t.Errorf("rendered %d Deployments, want the manager's and the console's", deployments)
	}

	lint := action.NewLint()
	lint.Strict, lint.Namespace, lint.KubeVersion = true, "agentrun-system", kv
	result := lint.Run([]string{path}, nil)
	if result.TotalChartsLinted != 1 {
		t.Errorf("helm lint linted %d charts", result.TotalChartsLinted)
	}
	for _, err := range result.Errors {
		t.Errorf("helm lint --strict %s: %v", filepath.Base(path), err)
	}
	for _, m := range result.Messages {
		if m.Severity >= support.WarningSev || (m.Severity == support.InfoSev && m.Error() != "[INFO] Chart.yaml: icon is recommended") {
			t.Errorf("helm lint --strict: %v", m)
		}
	}
}

// TestKrewManifestCarriesTheArchivesSums: each plugin archive holds the
// plugin binary make release built for its platform, alone; the krew
// manifest lists exactly the platforms built, each with its archive's
// sha256; krew's own validator accepts it, and krew installs this machine's
// archive from it, after which `kubectl agentrun` runs.
func TestKrewManifestCarriesTheArchivesSums(t *testing.T) {
	built(t)
	var m struct {
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				}
				URI, SHA256, Bin string
			}
		}
	}
	manifest := filepath.Join(dist, "agentrun.yaml")
	if err := yaml.Unmarshal(read(t, manifest), &m); err != nil {
		t.Fatal(err)
	}
	if m.Metadata.Name != "agentrun" || m.Spec.Version != version(t) || len(m.Spec.Platforms) != len(pluginPlatforms) {
		t.Fatalf("manifest %s %s with %d platforms, want %d", m.Metadata.Name, m.Spec.Version, len(m.Spec.Platforms), len(pluginPlatforms))
	}
	for _, p := range m.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		archive := "kubectl-agentrun_" + strings.ReplaceAll(platform, "/", "_") + ".tar.gz"
		data := read(t, filepath.Join(dist, archive))
		if p.SHA256 != sha256Hex(data) || !strings.HasSuffix(p.URI, "/"+version(t)+"/"+archive) || p.Bin != "kubectl-agentrun" || !slices.Contains(pluginPlatforms, platform) {
			t.Errorf("%s: %+v; the archive's sha256 is %s", platform, p, sha256Hex(data))
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]*tar.Header{}
		tr := tar.NewReader(zr)
		var content []byte
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
			content, _ = io.ReadAll(tr)
		}
		h := files["kubectl-agentrun"]
		if len(files) != 1 || h == nil || h.Mode != 0o755 || !bytes.Equal(content, read(t, filepath.Join(buildDir(dist, platform), "kubectl-agentrun"))) {
			t.Errorf("%s holds %v, want kubectl-agentrun alone, executable, the binary built for %s", archive, files, platform)
		}
	}

	krewModule := filepath.Join(testenv.RepoRoot(), "hack", "krew")
	validate := exec.Command("go", "tool", "validate-krew-manifest", "-manifest", manifest, "-skip-install")
	validate.Dir = krewModule
	if out, err := validate.CombinedOutput(); err != nil || !strings.Contains(string(out), "structural validation OK") {
		t.Errorf("krew's validator rejects %s: %v\n%s", manifest, err, out)
	}

	host := runtime.GOOS + "/" + runtime.GOARCH
	if !slices.Contains(pluginPlatforms, host) {
		t.Skipf("no archive for %s", host)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-krew"), "sigs.k8s.io/krew/cmd/krew")
	build.Dir = krewModule
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building krew: %v\n%s", err, out)
	}
	path := "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")
	install := exec.Command(testenv.KubectlPath(), "krew", "install", "--manifest="+manifest,
		"--archive="+filepath.Join(dist, "kubectl-agentrun_"+strings.ReplaceAll(host, "/", "_")+".tar.gz"))
	install.Env = append(os.Environ(), "KREW_ROOT="+filepath.Join(dir, "krew"), path)
	if out, err := install.CombinedOutput(); err != nil || !strings.Contains(string(out), "Installed plugin: agentrun") {
		t.Fatalf("kubectl krew install: %v\n%s", err, out)
	}
	run := exec.Command(testenv.KubectlPath(), "agentrun", "--help")
	run.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "krew", "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := run.CombinedOutput(); err != nil || !strings.Contains(string(out), "Answer what a run waits on:") {
		t.Errorf("kubectl agentrun as krew installed it: %v\n%s", err, out)
	}
}

// TestChecksumsCoverTheRelease: checksums.txt, in sha256sum's format, lists
// every file of the release (not the build directory) once, with its sum.
func TestChecksumsCoverTheRelease(t *testing.T) {
	built(t)
	files := releaseFiles(t, dist)
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(files["checksums.txt"]))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("checksums.txt line %q", sc.Text())
		}
		if _, dup := listed[name]; dup {
			t.Errorf("checksums.txt lists %s twice", name)
		}
		listed[name] = sum
	}
	delete(files, "checksums.txt")
	for name, data := range files {
		if listed[name] != sha256Hex(data) {
			t.Errorf("checksums.txt has %q for %s, whose sha256 is %s", listed[name], name, sha256Hex(data))
		}
	}
	for name := range listed {
		if _, ok := files[name]; !ok {
			t.Errorf("checksums.txt lists %s, which the release has not", name)
		}
	}
	for _, want := range []string{"image/digest", "agentrun.yaml", "kubectl-agentrun_linux_amd64.tar.gz", "image/oci/index.json"} {
		if _, ok := listed[want]; !ok {
			t.Errorf("checksums.txt lacks %s", want)
		}
	}
}
