package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	epoch     = time.Unix(1767225600, 0).UTC()
	platforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}
)

// build assembles a two-platform index of made-up binaries.
func build(t *testing.T, when time.Time) (v1.ImageIndex, []v1.Image) {
	t.Helper()
	base, err := Layer(BaseFiles([]byte("-----BEGIN CERTIFICATE-----\n")), when)
	if err != nil {
		t.Fatal(err)
	}
	var images []v1.Image
	for _, p := range platforms {
		img, err := Image(Spec{Platform: p, Base: base, Epoch: when,
			Binaries: map[string][]byte{"manager": []byte("manager for " + p.String()), "kubectl-agentrun": []byte("plugin for " + p.String())},
			Labels:   map[string]string{"org.opencontainers.image.version": "v9.9.9"}})
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, img)
	}
	idx, err := Index(platforms, images)
	if err != nil {
		t.Fatal(err)
	}
	return idx, images
}

type entry struct {
	name     string
	mode     int64
	uid, gid int
	typ      byte
	mtime    time.Time
	data     string
}

func entries(t *testing.T, l v1.Layer) []entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out []entry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, entry{h.Name, h.Mode, h.Uid, h.Gid, h.Typeflag, h.ModTime.UTC(), string(b)})
	}
}

// TestImageLayersAndConfig: each image is the base layer (the accounts, the
// CA bundle, the non-root user's home and a sticky /tmp) and a layer of the
// binaries at the root; every entry is root's but the home, its time the
// epoch; the config runs /manager as 65532 with the labels given, and the
// index names each image's platform.
func TestImageLayersAndConfig(t *testing.T) {
	idx, images := build(t, epoch)
	wantBase := []entry{
		{"etc/", 0o755, 0, 0, tar.TypeDir, epoch, ""},
		{"etc/group", 0o644, 0, 0, tar.TypeReg, epoch, "root:x:0:\nnonroot:x:65532:\n"},
		{"etc/passwd", 0o644, 0, 0, tar.TypeReg, epoch, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{"etc/ssl/", 0o755, 0, 0, tar.TypeDir, epoch, ""},
		{"etc/ssl/certs/", 0o755, 0, 0, tar.TypeDir, epoch, ""},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0, tar.TypeReg, epoch, "-----BEGIN CERTIFICATE-----\n"},
		{"home/", 0o755, 0, 0, tar.TypeDir, epoch, ""},
		{"home/nonroot/", 0o700, 65532, 65532, tar.TypeDir, epoch, ""},
		{"root/", 0o700, 0, 0, tar.TypeDir, epoch, ""},
		{"tmp/", 0o1777, 0, 0, tar.TypeDir, epoch, ""},
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != 2 {
		t.Fatalf("index %s with %d manifests", m.MediaType, len(m.Manifests))
	}
	for i, img := range images {
		p := platforms[i]
		if d := m.Manifests[i]; d.Platform == nil || d.Platform.OS != p.OS || d.Platform.Architecture != p.Arch || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("index entry %d: %+v", i, d)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 2 {
			t.Fatalf("%s: %d layers (%v)", p, len(layers), err)
		}
		if got := entries(t, layers[0]); !slices.Equal(got, wantBase) {
			t.Errorf("%s base layer:\n got %v\nwant %v", p, got, wantBase)
		}
		wantBins := []entry{
			{"kubectl-agentrun", 0o755, 0, 0, tar.TypeReg, epoch, "plugin for " + p.String()},
			{"manager", 0o755, 0, 0, tar.TypeReg, epoch, "manager for " + p.String()},
		}
		if got := entries(t, layers[1]); !slices.Equal(got, wantBins) {
			t.Errorf("%s binaries layer:\n got %v\nwant %v", p, got, wantBins)
		}
		for _, l := range layers {
			if mt, _ := l.MediaType(); mt != types.OCILayer {
				t.Errorf("%s: layer media type %s", p, mt)
			}
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != p.OS || cf.Architecture != p.Arch || cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/manager"}) ||
			cf.Config.Labels["org.opencontainers.image.version"] != "v9.9.9" || !cf.Created.Equal(epoch) || len(cf.History) != 2 || len(cf.RootFS.DiffIDs) != 2 {
			t.Errorf("%s config: %+v", p, cf)
		}
		if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
			t.Errorf("%s: manifest media type %s", p, mt)
		}
	}
}

// TestSameInputsSameDigest: two assemblies of the same files at the same
// epoch give the same index digest; another epoch gives another.
func TestSameInputsSameDigest(t *testing.T) {
	a, _ := build(t, epoch)
	b, _ := build(t, epoch)
	c, _ := build(t, epoch.Add(time.Second))
	da, _ := a.Digest()
	db, _ := b.Digest()
	dc, _ := c.Digest()
	if da != db {
		t.Errorf("the same inputs gave %s and %s", da, db)
	}
	if da == dc {
		t.Errorf("another epoch gave the same digest %s", da)
	}
}

// TestTarRefusesMissingParents: a layer's directories come before their
// files, so a layer cannot hold a file whose directory is not an entry.
func TestTarRefusesMissingParents(t *testing.T) {
	if _, err := Tar([]File{{Path: "etc/passwd", Mode: 0o644}}, epoch); err == nil {
		t.Error("Tar wrote etc/passwd without etc/")
	}
	if _, err := Tar([]File{{Path: "/manager", Mode: 0o755}}, epoch); err == nil {
		t.Error("Tar wrote an absolute path")
	}
}

// TestLayoutAndArchive: the OCI layout reads back as the same index; the
// per-platform archive is a Docker archive (manifest.json, what `docker
// load` reads) of the same config and layers, and an OCI layout whose
// index.json names the same manifest for containerd (what `kind load
// image-archive` imports).
func TestLayoutAndArchive(t *testing.T) {
	idx, images := build(t, epoch)
	tag, err := name.NewTag("registry.example/agentrun-operator:v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := WriteLayout(dir, idx, tag); err != nil {
		t.Fatal(err)
	}
	back, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digestOf(t, idx), digestOf(t, back); a != b {
		t.Errorf("the layout holds %s, not %s", b, a)
	}

	var buf bytes.Buffer
	if err := WriteArchive(&buf, images[1], platforms[1], tag, epoch); err != nil {
		t.Fatal(err)
	}
	archive := buf.Bytes()
	docker, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(archive)), nil }, &tag)
	if err != nil {
		t.Fatalf("reading the archive as docker load does: %v", err)
	}
	wantCfg, _ := images[1].ConfigName()
	if gotCfg, err := docker.ConfigName(); err != nil || gotCfg != wantCfg {
		t.Errorf("the Docker archive's config %s (%v), want %s", gotCfg, err, wantCfg)
	}
	wantLayers, _ := images[1].Layers()
	gotLayers, err := docker.Layers()
	if err != nil || len(gotLayers) != len(wantLayers) {
		t.Fatalf("the Docker archive has %d layers (%v)", len(gotLayers), err)
	}
	for i := range wantLayers {
		w, _ := wantLayers[i].DiffID()
		g, _ := gotLayers[i].DiffID()
		if w != g {
			t.Errorf("layer %d: %s, want %s", i, g, w)
		}
	}

	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: time %s", h.Name, h.ModTime)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	d := index.Manifests[0]
	if d.Digest != digestOf(t, images[1]) || d.Annotations[ImageNameAnnotation] != tag.Name() || d.Annotations[RefNameAnnotation] != "v9.9.9" ||
		d.Platform == nil || d.Platform.Architecture != "arm64" {
		t.Errorf("index.json names %+v", d)
	}
	raw, _ := images[1].RawManifest()
	if !bytes.Equal(files["blobs/sha256/"+d.Digest.Hex], raw) {
		t.Error("the archive's manifest blob is not the image's manifest")
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout: %s", files["oci-layout"])
	}
	var again bytes.Buffer
	if err := WriteArchive(&again, images[1], platforms[1], tag, epoch); err != nil || !bytes.Equal(again.Bytes(), archive) {
		t.Errorf("a second archive of the same image differs (%v)", err)
	}
}

// TestPushToRegistry: the index pushed to a registry (go-containerregistry's
// own, on loopback) reads back with the same digest, and so does each
// platform's image.
func TestPushToRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	idx, images := build(t, epoch)
	tag, err := name.NewTag(strings.TrimPrefix(srv.URL, "http://") + "/agentrun-operator:v9.9.9")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Push(context.Background(), idx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if ref.DigestStr() != digestOf(t, idx).String() {
		t.Errorf("Push returned %s, the index is %s", ref, digestOf(t, idx))
	}
	pulled, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if digestOf(t, pulled) != digestOf(t, idx) {
		t.Errorf("pulled %s, pushed %s", digestOf(t, pulled), digestOf(t, idx))
	}
	for i, p := range platforms {
		img, err := remote.Image(tag, remote.WithPlatform(v1.Platform{OS: p.OS, Architecture: p.Arch}))
		if err != nil {
			t.Fatal(err)
		}
		if digestOf(t, img) != digestOf(t, images[i]) {
			t.Errorf("%s: pulled %s, pushed %s", p, digestOf(t, img), digestOf(t, images[i]))
		}
	}
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestCABundle: the bundle is the directory's certificates in name order,
// each ending in a newline; a directory with none, or a file that is not a
// certificate, fails.
func TestCABundle(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"b.crt":     "-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----",
		"a.crt":     "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n",
		"notes.txt": "not a certificate",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := CABundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n"; string(b) != want {
		t.Errorf("bundle:\n%s\nwant:\n%s", b, want)
	}
	if _, err := CABundle(t.TempDir()); err == nil {
		t.Error("an empty directory gave a bundle")
	}
	if err := os.WriteFile(filepath.Join(dir, "c.crt"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CABundle(dir); err == nil {
		t.Error("a .crt that is no certificate went into the bundle")
	}
}
