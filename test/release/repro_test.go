package release_test

import (
	"bytes"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestSameCommitSameDigest: a release is a function of the commit. Building
// this machine's binaries again (make release-binaries) gives the same
// bytes as make release's build, and assembling the release again from the
// binaries (make release-files) gives every file of it byte for byte again:
// the image index's digest, the archives, the SBOMs, the chart, the plugin
// archives, the krew manifest and checksums.txt. (Cross-compiling the
// other platforms a second time would prove the same of Go's builds at the
// cost of minutes; docs/releasing.md says what the digest depends on.)
func TestSameCommitSameDigest(t *testing.T) {
	built(t)
	again := t.TempDir()
	if _, err := makeIn("release-binaries", "DIST="+again, "IMAGE_PLATFORMS=linux/amd64", "PLUGIN_PLATFORMS="); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"manager", "kubectl-agentrun"} {
		if !bytes.Equal(read(t, filepath.Join(buildDir(again, "linux/amd64"), b)), read(t, filepath.Join(buildDir(dist, "linux/amd64"), b))) {
			t.Errorf("a second build of linux/amd64 %s differs from the first", b)
		}
	}

	assembled := t.TempDir()
	if _, err := makeIn("release-files", "DIST="+assembled, "BUILD="+filepath.Join(dist, "build"),
		"IMAGE_PLATFORMS="+strings.Join(imagePlatforms, " "), "PLUGIN_PLATFORMS="+strings.Join(pluginPlatforms, " ")); err != nil {
		t.Fatal(err)
	}
	first, second := releaseFiles(t, dist), releaseFiles(t, assembled)
	for rel, b := range first {
		if c, ok := second[rel]; !ok {
			t.Errorf("the second assembly has no %s", rel)
		} else if !bytes.Equal(b, c) {
			t.Errorf("%s differs between two assemblies of the same binaries", rel)
		}
	}
	for rel := range second {
		if _, ok := first[rel]; !ok {
			t.Errorf("the second assembly has %s, the first not", rel)
		}
	}
	if d := strings.TrimSpace(string(first["image/digest"])); !strings.HasPrefix(d, "sha256:") || d != digestOf(t, index(t, assembled)).String() {
		t.Errorf("image/digest says %q, the layout holds %s", d, digestOf(t, index(t, assembled)))
	}
	t.Logf("the index digest, twice: %s", strings.TrimSpace(string(second["image/digest"])))
}

// releaseFiles are a DIST's files (not its build directory) by path.
func releaseFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel == "build" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("%s holds only %d files", dir, len(out))
	}
	return out
}

// TestPushAndPullBack: make image-push REGISTRY=<a registry> (go-containerregistry's
// own registry server, on loopback) pushes the image index make release
// built and prints its reference by digest; pulled back, the index has that
// digest, and each platform's image the digest, config and layers of the
// one in the OCI layout.
func TestPushAndPullBack(t *testing.T) {
	built(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(reg, "127.0.0.1:") {
		t.Fatalf("the registry is at %s, not on loopback", reg)
	}
	out, err := makeIn("image-push", "DIST="+dist, "REGISTRY="+reg)
	if err != nil {
		t.Fatal(err)
	}
	idx := index(t, dist)
	want := reg + "/agentrun-operator@" + digestOf(t, idx).String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[len(lines)-1] != want {
		t.Errorf("make image-push printed %q, want its last line %s", out, want)
	}
	tag, err := name.NewTag(reg + "/agentrun-operator:" + version(t))
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, pulled) != digestOf(t, idx) {
		t.Errorf("pulled the index as %s, pushed %s", digestOf(t, pulled), digestOf(t, idx))
	}
	local := images(t, idx)
	for platform, pulledImg := range images(t, pulled) {
		img := local[platform]
		if digestOf(t, pulledImg) != digestOf(t, img) || digestOf(t, configOf{pulledImg}) != digestOf(t, configOf{img}) {
			t.Errorf("%s: pulled %s (config %s), pushed %s", platform, digestOf(t, pulledImg), digestOf(t, configOf{pulledImg}), digestOf(t, img))
		}
		pl, err := pulledImg.Layers()
		if err != nil {
			t.Fatal(err)
		}
		ll, _ := img.Layers()
		for i := range ll {
			if i >= len(pl) || digestOf(t, pl[i]) != digestOf(t, ll[i]) {
				t.Errorf("%s: layer %d differs after the round trip", platform, i)
				continue
			}
			rc, err := pl[i].Compressed()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || sha256Hex(b) != digestOf(t, ll[i]).Hex {
				t.Errorf("%s: the registry served layer %d with other bytes (%v)", platform, i, err)
			}
		}
	}
}
