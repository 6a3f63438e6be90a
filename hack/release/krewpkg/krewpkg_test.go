package krewpkg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentrun-dev/agentrun-operator/hack/release/imagebuild"
)

var epoch = time.Unix(1767225600, 0).UTC()

func committed(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "plugins", "agentrun.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type manifest struct {
	Spec struct {
		Version   string
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			}
			URI    string
			SHA256 string `yaml:"sha256"`
			Bin    string
		}
	}
}

// TestManifestCarriesTheSums: the committed manifest, given the sums of the
// linux archives, carries each in its platform's entry, drops the darwin
// entries it has no archive for, and no longer says its sums are
// placeholders.
func TestManifestCarriesTheSums(t *testing.T) {
	sums := map[imagebuild.Platform]string{
		{OS: "linux", Arch: "amd64"}: strings.Repeat("1", 64),
		{OS: "linux", Arch: "arm64"}: strings.Repeat("2", 64),
	}
	out, err := Manifest(committed(t), "v0.1.0", sums)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := yaml.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.Version != "v0.1.0" || len(m.Spec.Platforms) != 2 {
		t.Fatalf("version %s, %d platforms:\n%s", m.Spec.Version, len(m.Spec.Platforms), out)
	}
	for _, p := range m.Spec.Platforms {
		plat := imagebuild.Platform{OS: p.Selector.MatchLabels["os"], Arch: p.Selector.MatchLabels["arch"]}
		if p.SHA256 != sums[plat] || p.Bin != Binary || !strings.HasSuffix(p.URI, "/v0.1.0/"+ArchiveName(plat)) {
			t.Errorf("%s: %+v", plat, p)
		}
	}
	if strings.Contains(string(out), "placeholder") || strings.Contains(string(out), strings.Repeat("0", 64)) {
		t.Errorf("the released manifest still speaks of placeholders:\n%s", out)
	}
	if !strings.HasPrefix(string(out), "# Krew plugin manifest") {
		t.Errorf("the released manifest does not start with its header:\n%s", out)
	}
}

// TestManifestRefusesAnotherRelease: a version the manifest does not name,
// or a platform it has no entry for, fails.
func TestManifestRefusesAnotherRelease(t *testing.T) {
	one := map[imagebuild.Platform]string{{OS: "linux", Arch: "amd64"}: strings.Repeat("1", 64)}
	if _, err := Manifest(committed(t), "v0.2.0", one); err == nil {
		t.Error("a manifest of v0.1.0 was written for v0.2.0")
	}
	if _, err := Manifest(committed(t), "v0.1.0", map[imagebuild.Platform]string{{OS: "windows", Arch: "amd64"}: strings.Repeat("1", 64)}); err == nil {
		t.Error("a platform the manifest lacks was accepted")
	}
}

// TestArchive: the archive holds the binary alone, executable, at the epoch.
func TestArchive(t *testing.T) {
	a, err := Archive([]byte("binary"), epoch)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil || h.Name != Binary || h.Mode != 0o755 || !h.ModTime.Equal(epoch) {
		t.Fatalf("first entry %+v (%v)", h, err)
	}
	if b, _ := io.ReadAll(tr); string(b) != "binary" {
		t.Errorf("content %q", b)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("a second entry (%v)", err)
	}
}
