package release_test

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// debianCAs is where Debian's ca-certificates package keeps its
// certificates, the image's bundle's source.
const debianCAs = "/usr/share/ca-certificates/mozilla"

// debianBundle is the package's certificates, in name order, one PEM
// bundle, as update-ca-certificates concatenates them.
func debianBundle(t *testing.T) []byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(debianCAs, "*.crt"))
	if err != nil || len(files) < 100 {
		t.Fatalf("Debian's ca-certificates: %d files in %s (%v)", len(files), debianCAs, err)
	}
	slices.Sort(files)
	var buf bytes.Buffer
	for _, f := range files {
		b := read(t, f)
		buf.Write(b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()
}

// pemBlocks are the certificates of a PEM bundle, as DER.
func pemBlocks(data []byte) [][]byte {
	var out [][]byte
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		out = append(out, b.Bytes)
	}
}

// layerEntry is what a test looks at in a layer's tar header.
type layerEntry struct {
	mode     int64
	uid, gid int
	typ      byte
	data     []byte
}

func layerEntries(t *testing.T, l v1.Layer) map[string]layerEntry {
	t.Helper()
	if mt, err := l.MediaType(); err != nil || mt != types.OCILayer {
		t.Errorf("layer media type %s (%v)", mt, err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]layerEntry{}
	eachTarEntry(t, rc, func(h *tar.Header, b []byte) {
		out[h.Name] = layerEntry{h.Mode, h.Uid, h.Gid, h.Typeflag, b}
	})
	return out
}

// eachTarEntry calls fn with each entry of the tar stream r and its bytes.
func eachTarEntry(t *testing.T, r io.Reader, fn func(*tar.Header, []byte)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fn(h, b)
	}
}

// TestImageLayersHoldOnlyTheRootfs: each platform's image is two layers and
// nothing else: the root filesystem (the accounts, root and nonroot as
// 65532, with its home; a sticky /tmp; the CA bundle: the certificates of
// Debian's ca-certificates package, each one also in this machine's
// /etc/ssl/certs/ca-certificates.crt, and none of the local CAs this
// machine adds to that file), then the manager and the
// plugin at the root, byte for byte the binaries make release built for
// that platform, owned by root and not writable by the user the image runs
// as.
func TestImageLayersHoldOnlyTheRootfs(t *testing.T) {
	built(t)
	ca := debianBundle(t)
	system := pemBlocks(read(t, "/etc/ssl/certs/ca-certificates.crt"))
	certs := pemBlocks(ca)
	files, _ := filepath.Glob(filepath.Join(debianCAs, "*.crt"))
	if len(certs) != len(files) {
		t.Errorf("the bundle holds %d certificates, Debian's package %d", len(certs), len(files))
	}
	for i, c := range certs {
		if _, err := x509.ParseCertificate(c); err != nil || !slices.ContainsFunc(system, func(s []byte) bool { return bytes.Equal(s, c) }) {
			t.Errorf("certificate %d of the bundle is not one of /etc/ssl/certs/ca-certificates.crt (%v)", i, err)
		}
	}
	local, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	for _, l := range local {
		for _, c := range pemBlocks(read(t, l)) {
			if slices.ContainsFunc(certs, func(s []byte) bool { return bytes.Equal(s, c) }) {
				t.Errorf("the bundle holds the local CA of %s", l)
			}
		}
	}
	for platform, img := range images(t, index(t, dist)) {
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%s: %d layers (%v), want 2", platform, len(layers), err)
		}
		base := layerEntries(t, layers[0])
		want := map[string]layerEntry{
			"etc/":                              {0o755, 0, 0, tar.TypeDir, nil},
			"etc/group":                         {0o644, 0, 0, tar.TypeReg, []byte("root:x:0:\nnonroot:x:65532:\n")},
			"etc/passwd":                        {0o644, 0, 0, tar.TypeReg, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
			"etc/ssl/":                          {0o755, 0, 0, tar.TypeDir, nil},
			"etc/ssl/certs/":                    {0o755, 0, 0, tar.TypeDir, nil},
			"etc/ssl/certs/ca-certificates.crt": {0o644, 0, 0, tar.TypeReg, ca},
			"home/":                             {0o755, 0, 0, tar.TypeDir, nil},
			"home/nonroot/":                     {0o700, 65532, 65532, tar.TypeDir, nil},
			"root/":                             {0o700, 0, 0, tar.TypeDir, nil},
			"tmp/":                              {0o1777, 0, 0, tar.TypeDir, nil},
		}
		compareEntries(t, platform+" root filesystem layer", base, want)
		bins := layerEntries(t, layers[1])
		compareEntries(t, platform+" binaries layer", bins, map[string]layerEntry{
			"manager":          {0o755, 0, 0, tar.TypeReg, read(t, filepath.Join(buildDir(dist, platform), "manager"))},
			"kubectl-agentrun": {0o755, 0, 0, tar.TypeReg, read(t, filepath.Join(buildDir(dist, platform), "kubectl-agentrun"))},
		})
	}
}

func compareEntries(t *testing.T, what string, got, want map[string]layerEntry) {
	t.Helper()
	for n, w := range want {
		g, ok := got[n]
		switch {
		case !ok:
			t.Errorf("%s lacks %s", what, n)
		case g.mode != w.mode || g.uid != w.uid || g.gid != w.gid || g.typ != w.typ:
			t.Errorf("%s: %s is type %c mode %o owner %d:%d, want type %c mode %o owner %d:%d", what, n, g.typ, g.mode, g.uid, g.gid, w.typ, w.mode, w.uid, w.gid)
		case !bytes.Equal(g.data, w.data):
			t.Errorf("%s: %s holds %d bytes, not the %d expected", what, n, len(g.data), len(w.data))
		}
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			t.Errorf("%s holds %s, which is not expected", what, n)
		}
	}
}

// TestImageConfigIsAsDocumented: every image runs /manager as 65532:65532
// from /, was created at the commit's time, and carries the OCI labels
// docs/releasing.md lists: source, revision (the commit), version (the
// chart's appVersion), licenses, created, and the name and sha256 of the
// SBOM written beside it; each config names its own platform.
func TestImageConfigIsAsDocumented(t *testing.T) {
	built(t)
	commitTime, err := time.Parse(time.RFC3339, git(t, "log", "-1", "--format=%cI", "HEAD"))
	if err != nil {
		t.Fatal(err)
	}
	rev := git(t, "rev-parse", "HEAD")
	if git(t, "status", "--porcelain", "--untracked-files=no") != "" {
		rev += "-dirty"
	}
	for platform, img := range images(t, index(t, dist)) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
			t.Errorf("%s: manifest media type %s", platform, mt)
		}
		c := cf.Config
		if cf.OS+"/"+cf.Architecture != platform || c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/manager"}) ||
			len(c.Cmd) != 0 || c.WorkingDir != "/" || !cf.Created.Equal(commitTime) {
			t.Errorf("%s: config os %s arch %s user %q entrypoint %v cmd %v workdir %q created %s", platform, cf.OS, cf.Architecture,
				c.User, c.Entrypoint, c.Cmd, c.WorkingDir, cf.Created.Time)
		}
		sbomName := "agentrun-operator_" + version(t) + "_" + strings.ReplaceAll(platform, "/", "_") + ".cdx.json"
		sbom, err := os.ReadFile(filepath.Join(dist, "image", sbomName))
		if err != nil {
			t.Errorf("%s: the SBOM beside the image: %v", platform, err)
		}
		want := map[string]string{
			"org.opencontainers.image.title":    "agentrun-operator",
			"org.opencontainers.image.source":   source,
			"org.opencontainers.image.revision": rev,
			"org.opencontainers.image.version":  version(t),
			"org.opencontainers.image.licenses": licenses,
			"org.opencontainers.image.created":  commitTime.UTC().Format(time.RFC3339),
			"dev.agentrun.sbom":                 sbomName,
			"dev.agentrun.sbom.sha256":          sha256Hex(sbom),
		}
		for k, v := range want {
			if c.Labels[k] != v {
				t.Errorf("%s: label %s is %q, want %q", platform, k, c.Labels[k], v)
			}
		}
		if c.Labels["org.opencontainers.image.description"] == "" || len(c.Labels) != len(want)+1 {
			t.Errorf("%s: labels %v", platform, c.Labels)
		}
		if len(cf.History) != 2 || len(cf.RootFS.DiffIDs) != 2 {
			t.Errorf("%s: %d history entries, %d layers", platform, len(cf.History), len(cf.RootFS.DiffIDs))
		}
	}
}

// TestManagerRunsAsNonRootInTheImage: the image's root filesystem, unpacked
// as a container runtime would, runs /manager --help and /kubectl-agentrun
// --help chrooted into it as uid and gid 65532: the binaries are static
// (the image has no libc) and need nothing the image lacks. Every
// platform's binaries are static executables of their architecture.
// Running them needs root (chroot, setuid), as tests run here.
func TestManagerRunsAsNonRootInTheImage(t *testing.T) {
	built(t)
	imgs := images(t, index(t, dist))
	for platform := range imgs {
		for _, b := range []string{"manager", "kubectl-agentrun"} {
			checkStaticELF(t, filepath.Join(buildDir(dist, platform), b), platform)
		}
	}
	img, ok := imgs["linux/"+runtime.GOARCH]
	if !ok || runtime.GOOS != "linux" {
		t.Skipf("no image for this machine's platform %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot and running as 65532 need root")
	}
	root := t.TempDir()
	unpack(t, img, root)
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for bin, want := range map[string]string{
		"/manager":          "-metrics-bind-address",
		"/kubectl-agentrun": "Answer what a run waits on:",
	} {
		cmd := exec.Command(bin, "--help")
		cmd.Dir = "/"
		cmd.Env = []string{"HOME=/home/nonroot"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s --help in the image as 65532: %v\n%s", bin, err, out)
		}
	}
}

// unpack writes the image's filesystem into dir, owners and modes as the
// layers give them.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("entry %s leaves the root", h.Name)
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, mode); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("entry %s of type %c", h.Name, h.Typeflag)
		}
		if h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
	}
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkStaticELF: path is a static Linux executable for platform.
func checkStaticELF(t *testing.T, path, platform string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	if want, ok := elfMachine[strings.TrimPrefix(platform, "linux/")]; !ok || f.Machine != want || f.Type != elf.ET_EXEC {
		t.Errorf("%s: ELF %s %s, for %s", path, f.Machine, f.Type, platform)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", path)
		}
	}
}

// TestArchivesLoadAsDockerAndContainerdRead: each platform's archive is a
// Docker archive (manifest.json, what `docker load` reads) of the image's
// config and layers, tagged IMAGE:VERSION, and an OCI layout whose
// index.json names the image's manifest, by the index's digest for that
// platform, under the name containerd's import (`kind load image-archive`)
// tags it with.
func TestArchivesLoadAsDockerAndContainerdRead(t *testing.T) {
	built(t)
	tag, err := name.NewTag(imageRepo + ":" + version(t))
	if err != nil {
		t.Fatal(err)
	}
	for platform, img := range images(t, index(t, dist)) {
		path := filepath.Join(dist, "image", "agentrun-operator_"+version(t)+"_"+strings.ReplaceAll(platform, "/", "_")+".tar")
		docker, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Errorf("%s: reading %s as docker load does: %v", platform, path, err)
			continue
		}
		if got, want := digestOf(t, configOf{docker}), digestOf(t, configOf{img}); got != want {
			t.Errorf("%s: the Docker archive's config %s, the image's %s", platform, got, want)
		}
		dl, _ := docker.Layers()
		il, _ := img.Layers()
		if len(dl) != len(il) {
			t.Fatalf("%s: %d layers in the Docker archive, %d in the image", platform, len(dl), len(il))
		}
		for i := range il {
			if a, b := diffID(t, dl[i]), diffID(t, il[i]); a != b {
				t.Errorf("%s: layer %d is %s in the archive, %s in the image", platform, i, a, b)
			}
		}
		files := tarFiles(t, read(t, path))
		var idx v1.IndexManifest
		if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
			t.Fatalf("%s: index.json %s (%v)", platform, files["index.json"], err)
		}
		d := idx.Manifests[0]
		raw, _ := img.RawManifest()
		if d.Digest != digestOf(t, img) || d.Annotations["io.containerd.image.name"] != tag.Name() ||
			!bytes.Equal(files["blobs/sha256/"+d.Digest.Hex], raw) {
			t.Errorf("%s: index.json names %+v, want the image's manifest %s as %s", platform, d, digestOf(t, img), tag.Name())
		}
	}
}

type configOf struct{ img v1.Image }

func (c configOf) Digest() (v1.Hash, error) { return c.img.ConfigName() }

func diffID(t *testing.T, l v1.Layer) v1.Hash {
	t.Helper()
	h, err := l.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func tarFiles(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	eachTarEntry(t, bytes.NewReader(data), func(h *tar.Header, b []byte) { out[h.Name] = b })
	return out
}
