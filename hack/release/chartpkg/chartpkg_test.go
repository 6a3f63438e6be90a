package chartpkg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var epoch = time.Unix(1767225600, 0).UTC()

const values = `# head comment
nameOverride: ""
image:
  # repository of the manager image.
  repository: ghcr.io/agentrun-dev/agentrun-operator
  # tag of the manager image.
  tag: ""
  # digest pins the image.
  digest: ""
  pullPolicy: IfNotPresent
imagePullSecrets: []
other:
  digest: keep
`

// TestPinImage: only image.repository and image.digest change, comments and
// every other line (another block's digest among them) stay.
func TestPinImage(t *testing.T) {
	out, err := PinImage([]byte(values), "registry.example/agentrun", "sha256:"+strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("  repository: ghcr.io/agentrun-dev/agentrun-operator", "  repository: registry.example/agentrun",
		`  digest: ""`, `  digest: "sha256:`+strings.Repeat("ab", 32)+`"`).Replace(values)
	if string(out) != want {
		t.Errorf("pinned values:\n%s\nwant:\n%s", out, want)
	}
	if _, err := PinImage([]byte("image:\n  repository: x\n"), "r", "sha256:0"); err == nil {
		t.Error("PinImage accepted an image block without digest:")
	}
}

func writeChart(t *testing.T, files map[string]string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for rel, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, rel)
	}
	slices.Sort(names)
	return dir, names
}

// TestPackage: the archive holds the chart's files under its name, less
// what .helmignore and Helm's own rule (hidden files in templates/) leave
// out, its values pinned, every entry at the epoch; the same chart gives
// the same bytes.
func TestPackage(t *testing.T) {
	dir, names := writeChart(t, map[string]string{
		"Chart.yaml":             "apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: v1.2.3\n",
		".helmignore":            "# comment\n*.swp\n.git/\n",
		"values.yaml":            values,
		"templates/a.yaml":       "a: 1\n",
		"templates/.hidden.yaml": "x",
		"templates/a.yaml.swp":   "x",
		"files/.git/config":      "x",
		"crds/b.yaml":            "b: 1\n",
	})
	pkg, err := Package(dir, names, "registry.example/agentrun", "sha256:"+strings.Repeat("cd", 32), epoch)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(pkg))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header names %q at %s", zr.Name, zr.ModTime)
	}
	var got []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 {
			t.Errorf("%s: time %s uid %d", h.Name, h.ModTime, h.Uid)
		}
		got = append(got, h.Name)
		if h.Name == "demo/values.yaml" {
			b, _ := io.ReadAll(tr)
			if !strings.Contains(string(b), `digest: "sha256:`+strings.Repeat("cd", 32)+`"`) {
				t.Errorf("values.yaml is not pinned:\n%s", b)
			}
		}
	}
	want := []string{"demo/", "demo/.helmignore", "demo/Chart.yaml", "demo/crds/", "demo/crds/b.yaml", "demo/templates/", "demo/templates/a.yaml", "demo/values.yaml"}
	if !slices.Equal(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	again, err := Package(dir, names, "registry.example/agentrun", "sha256:"+strings.Repeat("cd", 32), epoch)
	if err != nil || !bytes.Equal(again, pkg) {
		t.Errorf("packaging the same chart twice gave other bytes (%v)", err)
	}
	c, _ := ReadChart(dir)
	if c.FileName() != "demo-1.2.3.tgz" {
		t.Errorf("file name %s", c.FileName())
	}
}

// TestIgnoreRefusesWhatItDoesNotRead: a .helmignore pattern this packager
// would read differently from Helm fails the release.
func TestIgnoreRefusesWhatItDoesNotRead(t *testing.T) {
	for _, p := range []string{"!keep.yaml", "docs/**", "templates/x.yaml"} {
		dir, _ := writeChart(t, map[string]string{".helmignore": p + "\n"})
		if _, err := ReadIgnore(dir); err == nil {
			t.Errorf(".helmignore %q was accepted", p)
		}
	}
}
