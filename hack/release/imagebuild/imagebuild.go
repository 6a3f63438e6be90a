// Package imagebuild assembles the manager image from files, with no Docker
// engine and no base image: a root filesystem of a few files written here
// (/etc/passwd naming the non-root user, the CA bundle) and the static
// binaries, as OCI images for each platform under one OCI index.
//
// Everything that goes into a digest is fixed by the inputs: tar headers
// carry the given epoch (SOURCE_DATE_EPOCH) as their time and root as their
// owner, entries are sorted, gzip headers carry no name or time, and the
// config's created time is the epoch, so the same inputs give the same
// index digest on any machine.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the uid and gid the image runs as: distroless's "nonroot",
// which the chart's Pod Security "restricted" securityContext expects.
const NonRoot = 65532

// User is the image config's user.
var User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)

// Entrypoint is the image config's entrypoint: the manager. The chart runs
// the plugin (/kubectl-agentrun, the web console) by setting command.
var Entrypoint = []string{"/manager"}

// CABundlePath is where the CA bundle sits in the image: the first file Go's
// crypto/x509 reads on Linux.
const CABundlePath = "etc/ssl/certs/ca-certificates.crt"

// Platform is an image's operating system and architecture (GOOS/GOARCH).
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatform reads "linux/amd64".
func ParsePlatform(s string) (Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("platform %q is not OS/ARCH", s)
	}
	return Platform{OS: os, Arch: arch}, nil
}

// File is one entry of a layer: a regular file when Dir is false.
type File struct {
	// Path is the entry's path without a leading slash.
	Path     string
	Dir      bool
	Mode     fs.FileMode // permission bits, with fs.ModeSticky where wanted
	UID, GID int
	Data     []byte
}

// BaseFiles is the root filesystem every platform's image starts from: the
// accounts (root, and nonroot as 65532 with its home), /tmp, and the CA
// bundle. Time zones are not files here: the manager embeds Go's time/tzdata.
func BaseFiles(caBundle []byte) []File {
	return []File{
		{Path: "etc", Dir: true, Mode: 0o755},
		{Path: "etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot))},
		{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", NonRoot))},
		{Path: "etc/ssl", Dir: true, Mode: 0o755},
		{Path: "etc/ssl/certs", Dir: true, Mode: 0o755},
		{Path: CABundlePath, Mode: 0o644, Data: caBundle},
		{Path: "home", Dir: true, Mode: 0o755},
		{Path: "home/nonroot", Dir: true, Mode: 0o700, UID: NonRoot, GID: NonRoot},
		{Path: "root", Dir: true, Mode: 0o700},
		{Path: "tmp", Dir: true, Mode: 0o777 | fs.ModeSticky},
	}
}

// BinaryFiles is the second layer: each binary at the root, owned by root,
// executable by everyone (and so not writable by the user the image runs as).
func BinaryFiles(binaries map[string][]byte) []File {
	var files []File
	for name, data := range binaries {
		files = append(files, File{Path: name, Mode: 0o755, Data: data})
	}
	return files
}

// Tar writes files as a tar stream, sorted by path, each header's times the
// epoch and its owner by number only.
func Tar(files []File, epoch time.Time) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	for _, f := range sorted {
		if f.Path == "" || strings.HasPrefix(f.Path, "/") || path.Clean(f.Path) != f.Path || seen[f.Path] {
			return nil, fmt.Errorf("bad or repeated path %q", f.Path)
		}
		seen[f.Path] = true
		if dir := path.Dir(f.Path); dir != "." && !seen[dir] {
			return nil, fmt.Errorf("%s: its directory %s is not an entry before it", f.Path, dir)
		}
		h := &tar.Header{
			Name:    f.Path,
			Mode:    int64(f.Mode.Perm()),
			Uid:     f.UID,
			Gid:     f.GID,
			ModTime: epoch.UTC().Truncate(time.Second),
		}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000 // c_ISVTX
		}
		if f.Dir {
			h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !f.Dir {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Gzip compresses data at the default level (within 1% of the best for
// these binaries, in under half the time) with a header that names no file
// and no time.
func Gzip(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer is an OCI gzip layer of files.
func Layer(files []File, epoch time.Time) (v1.Layer, error) {
	raw, err := Tar(files, epoch)
	if err != nil {
		return nil, err
	}
	gz, err := Gzip(raw)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Spec is what one platform's image is made of.
type Spec struct {
	Platform Platform
	// Base is BaseFiles' layer, the same for every platform.
	Base v1.Layer
	// Binaries maps a name at the image's root to the file's bytes.
	Binaries map[string][]byte
	// Labels are the config's labels (org.opencontainers.image.*).
	Labels map[string]string
	// Epoch is the config's and the layers' time.
	Epoch time.Time
}

// Image assembles one platform's OCI image: the base layer, then the
// binaries' layer, running Entrypoint as User.
func Image(s Spec) (v1.Image, error) {
	bins, err := Layer(BinaryFiles(s.Binaries), s.Epoch)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: s.Epoch.UTC().Truncate(time.Second)}
	cfg := &v1.ConfigFile{
		Architecture: s.Platform.Arch,
		OS:           s.Platform.OS,
		Created:      created,
		Config: v1.Config{
			User:       User,
			Entrypoint: Entrypoint,
			WorkingDir: "/",
			Labels:     s.Labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(s.Binaries))
	for n := range s.Binaries {
		names = append(names, "/"+n)
	}
	sort.Strings(names)
	return mutate.Append(img,
		mutate.Addendum{Layer: s.Base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/release: root filesystem (passwd, group, CA bundle, /home/nonroot, /tmp)"}},
		mutate.Addendum{Layer: bins, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/release: " + strings.Join(names, " ")}},
	)
}

// Index puts the images, in the order given, under one OCI image index,
// each descriptor naming its platform.
func Index(platforms []Platform, images []v1.Image) (v1.ImageIndex, error) {
	if len(platforms) != len(images) || len(images) == 0 {
		return nil, fmt.Errorf("%d platforms for %d images", len(platforms), len(images))
	}
	var adds []mutate.IndexAddendum
	for i, img := range images {
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: platforms[i].OS, Architecture: platforms[i].Arch},
		}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}
