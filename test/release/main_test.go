package release_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// The release TestMain builds, and what it was built with.
var (
	dist      string // the DIST make release wrote
	buildErr  error
	buildTook time.Duration
	skipWhy   string

	imagePlatforms  = []string{"linux/amd64", "linux/arm64"}
	pluginPlatforms = []string{"linux/amd64", "linux/arm64"}
)

const (
	imageRepo = "ghcr.io/agentrun-dev/agentrun-operator"
	licenses  = "NOASSERTION" // the Makefile's IMAGE_LICENSES
	source    = "https://github.com/agentrun-dev/agentrun-operator"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		skipWhy = "runs make release (cross-compiles the manager); skipped with -short"
		os.Exit(m.Run())
	}
	if p := strings.Fields(os.Getenv("AGENTRUN_TEST_RELEASE_PLATFORMS")); len(p) > 0 {
		imagePlatforms, pluginPlatforms = p, slices.Clone(p)
	}
	if os.Getenv("AGENTRUN_TEST_RELEASE_ALL") == "1" {
		pluginPlatforms = append(pluginPlatforms, "darwin/amd64", "darwin/arm64")
	}
	var err error
	if dist, err = os.MkdirTemp("", "agentrun-release-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	_, buildErr = makeIn("release", "DIST="+dist, "IMAGE_PLATFORMS="+strings.Join(imagePlatforms, " "),
		"PLUGIN_PLATFORMS="+strings.Join(pluginPlatforms, " "))
	buildTook = time.Since(start)
	code := m.Run()
	_ = os.RemoveAll(dist)
	os.Exit(code)
}

// built skips the test under -short and fails it when make release failed.
func built(t *testing.T) {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if buildErr != nil {
		t.Fatalf("make release: %v", buildErr)
	}
	t.Logf("make release took %s", buildTook.Round(time.Second))
}

// makeIn runs make with args in the repository, as a person would from a
// shell: no variables of an enclosing make (make test), SOURCE_DATE_EPOCH
// taken from the commit.
func makeIn(args ...string) (string, error) {
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	drop := regexp.MustCompile(`^(MAKEFLAGS|MFLAGS|MAKELEVEL|MAKEOVERRIDES|MAKE_TERMOUT|MAKE_TERMERR|SOURCE_DATE_EPOCH|DIST|BUILD|VERSION|IMAGE|REGISTRY|IMAGE_PLATFORMS|PLUGIN_PLATFORMS|IMAGE_LICENSES|GOOS|GOARCH)=`)
	for _, kv := range os.Environ() {
		if !drop.MatchString(kv) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("make %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// git runs git in the repository.
func git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// version is the release's: the chart's appVersion.
func version(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "agentrun-operator", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\n]+)"?$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return string(m[1])
}

// index reads the image index from the OCI layout of dir (a DIST).
func index(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	root, err := layout.ImageIndexFromPath(filepath.Join(dir, "image", "oci"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("the layout's index.json holds %+v, want one image index", m.Manifests)
	}
	if got, want := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"], version(t); got != want {
		t.Errorf("the layout names the index %q, want %q", got, want)
	}
	idx, err := root.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// images are the index's images by platform ("linux/amd64"), checking the
// index lists exactly imagePlatforms, in order.
func images(t *testing.T, idx v1.ImageIndex) map[string]v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != len(imagePlatforms) {
		t.Fatalf("index %s with %d manifests, want %d", m.MediaType, len(m.Manifests), len(imagePlatforms))
	}
	out := map[string]v1.Image{}
	for i, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS+"/"+d.Platform.Architecture != imagePlatforms[i] || d.MediaType != types.OCIManifestSchema1 {
			t.Fatalf("index entry %d is %+v, want %s", i, d, imagePlatforms[i])
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		out[imagePlatforms[i]] = img
	}
	return out
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// buildDir is where make release built a platform's binaries.
func buildDir(dir, platform string) string {
	return filepath.Join(dir, "build", strings.ReplaceAll(platform, "/", "_"))
}
