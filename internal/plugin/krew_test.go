package plugin

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// krewModule is the separate module that pins krew (hack/krew/go.mod).
func krewModule() string { return filepath.Join(testenv.RepoRoot(), "hack", "krew") }

// validateManifest runs krew's own validate-krew-manifest (the krew-index
// CI's check, without its install step, which downloads the uri) on path.
func validateManifest(t *testing.T, path string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", "tool", "validate-krew-manifest", "-manifest", path, "-skip-install")
	cmd.Dir = krewModule()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKrewManifest: plugins/agentrun.yaml passes krew's own validation
// (name matching the file, apiVersion and kind, a v-prefixed semantic
// version, platform selectors each matching a supported platform and none
// overlapping, uri, a 64-hex sha256, bin, a one-line short description),
// and `kubectl krew install --manifest --archive` installs it from an
// archive of the plugin built here, after which `kubectl agentrun` runs.
// With the committed placeholder sha256, krew refuses the same archive.
func TestKrewManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds krew from hack/krew; skipped with -short")
	}
	manifest := filepath.Join(testenv.RepoRoot(), "plugins", "agentrun.yaml")
	if out, err := validateManifest(t, manifest); err != nil || !strings.Contains(out, "structural validation OK") ||
		!strings.Contains(out, "no overlapping spec.platform[].selector") {
		t.Fatalf("krew rejects %s: %v\n%s", manifest, err, out)
	}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)

	// The validator refuses what krew would refuse.
	dir := t.TempDir()
	for name, bad := range map[string]string{
		"other.yaml":    text, // the name is not the file's
		"agentrun.yaml": strings.Replace(text, strings.Repeat("0", 64), "0000", 1),
		"agentrun.yml":  text,
	} {
		sub := filepath.Join(dir, strings.ReplaceAll(name, ".", "-"))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(sub, name)
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := validateManifest(t, path); err == nil {
			t.Errorf("krew's validator accepted the broken %s:\n%s", name, out)
		}
	}
	badVersion := strings.Replace(text, "version: v0.1.0", "version: 0.1.0", 1)
	if path := filepath.Join(dir, "agentrun.yaml"); os.WriteFile(path, []byte(badVersion), 0o644) != nil {
		t.Fatal("writing")
	} else if out, err := validateManifest(t, path); err == nil {
		t.Errorf("krew's validator accepted a version without v:\n%s", out)
	}

	// Install, as `kubectl krew install` would from a release.
	platform := runtime.GOOS + "_" + runtime.GOARCH
	if !strings.Contains(text, "kubectl-agentrun_"+platform+".tar.gz") {
		t.Skipf("the manifest has no archive for %s", platform)
	}
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-krew"), "sigs.k8s.io/krew/cmd/krew")
	build.Dir = krewModule()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building krew: %v\n%s", err, out)
	}
	plugin := filepath.Join(dir, "plugin", "kubectl-agentrun")
	build = exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-agentrun")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "kubectl-agentrun_"+platform+".tar.gz")
	sum := tarGz(t, archive, plugin)

	krew := func(manifest string) (string, error) {
		cmd := exec.Command(testenv.KubectlPath(), "krew", "install", "--manifest="+manifest, "--archive="+archive)
		root := filepath.Join(dir, "krew-root-"+filepath.Base(filepath.Dir(manifest)))
		cmd.Env = append(os.Environ(), "KREW_ROOT="+root, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	placeholder := filepath.Join(dir, "placeholder", "agentrun.yaml")
	if err := os.MkdirAll(filepath.Dir(placeholder), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(placeholder, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := krew(placeholder); err == nil || !strings.Contains(out, "checksum does not match") {
		t.Errorf("krew installed an archive the placeholder sha256 does not match: %v\n%s", err, out)
	}

	released := filepath.Join(dir, "released", "agentrun.yaml")
	if err := os.MkdirAll(filepath.Dir(released), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(released, []byte(withSum(t, text, platform, sum)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := krew(released); err != nil || !strings.Contains(out, "Installed plugin: agentrun") {
		t.Fatalf("kubectl krew install: %v\n%s", err, out)
	}
	run := exec.Command(testenv.KubectlPath(), "agentrun", "--help")
	run.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "krew-root-released", "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := run.CombinedOutput(); err != nil || !strings.Contains(string(out), "Answer what a run waits on:") {
		t.Errorf("kubectl agentrun as krew installed it: %v\n%s", err, out)
	}
}

// tarGz writes an archive holding file at its top level, and returns its
// sha256 as krew computes it.
func tarGz(t *testing.T, archive, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(file), Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// withSum is the manifest with sum as the sha256 of platform's archive, as
// it will be at release.
func withSum(t *testing.T, manifest, platform, sum string) string {
	t.Helper()
	re := regexp.MustCompile(`(kubectl-agentrun_` + regexp.QuoteMeta(platform) + `\.tar\.gz\n\s*sha256: ")0{64}(")`)
	if !re.MatchString(manifest) {
		t.Fatalf("no placeholder sha256 after the %s uri", platform)
	}
	return re.ReplaceAllString(manifest, "${1}"+sum+"${2}")
}
