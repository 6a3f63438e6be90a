package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RefNameAnnotation names a manifest in an OCI layout's index.json (its tag).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// ImageNameAnnotation is containerd's name for an image in an archive's
// index.json: what `ctr images import` (and so `kind load image-archive`)
// tags the image as.
const ImageNameAnnotation = "io.containerd.image.name"

// WriteLayout writes idx as an OCI image layout in dir (replacing what is
// there), its index.json naming it by tag.
func WriteLayout(dir string, idx v1.ImageIndex, tag name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefNameAnnotation: tag.TagStr()}))
}

// ReadLayout reads the one index an OCI layout written by WriteLayout holds.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("%s: want one image index in index.json, have %d manifests", dir, len(m.Manifests))
	}
	return root.ImageIndex(m.Manifests[0].Digest)
}

// dockerManifest is one entry of a `docker save` archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// WriteArchive writes one platform's image as a tar both `docker load` and
// `kind load image-archive` (containerd's import) accept, laid out as
// `docker save` does since Docker 25: an OCI image layout (oci-layout,
// index.json naming the image for containerd, blobs/sha256/...) that also
// has Docker's manifest.json pointing at the same blobs. Every entry's time
// is the epoch.
func WriteArchive(w io.Writer, img v1.Image, p Platform, tag name.Tag, epoch time.Time) error {
	blobs, dm, err := archiveBlobs(img, tag)
	if err != nil {
		return err
	}
	manifestJSON, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	size, err := img.Size()
	if err != nil {
		return err
	}
	indexJSON, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      size,
			Digest:    digest,
			Platform:  &v1.Platform{OS: p.OS, Architecture: p.Arch},
			Annotations: map[string]string{
				ImageNameAnnotation: tag.Name(),
				RefNameAnnotation:   tag.TagStr(),
			},
		}},
	})
	if err != nil {
		return err
	}
	return writeArchiveTar(w, blobs, map[string][]byte{
		"index.json":    indexJSON,
		"manifest.json": manifestJSON,
		"oci-layout":    []byte(`{"imageLayoutVersion":"1.0.0"}`),
	}, epoch)
}

// archiveBlobs are the image's manifest, config and compressed layers by
// their sha256, and Docker's manifest.json entry pointing at them.
func archiveBlobs(img v1.Image, tag name.Tag) (map[string][]byte, dockerManifest, error) {
	var dm dockerManifest
	blobs := map[string][]byte{}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, dm, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, dm, err
	}
	blobs[digest.Hex] = rawManifest
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, dm, err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return nil, dm, err
	}
	blobs[configName.Hex] = rawConfig
	dm = dockerManifest{Config: "blobs/sha256/" + configName.Hex, RepoTags: []string{tag.Name()}}
	layers, err := img.Layers()
	if err != nil {
		return nil, dm, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, dm, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, dm, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, dm, err
		}
		blobs[d.Hex] = b
		dm.Layers = append(dm.Layers, "blobs/sha256/"+d.Hex)
	}
	return blobs, dm, nil
}

// writeArchiveTar writes the blobs under blobs/sha256/ (sorted), then the
// top-level files (sorted), every entry at the epoch.
func writeArchiveTar(w io.Writer, blobs, top map[string][]byte, epoch time.Time) error {
	tw := tar.NewWriter(w)
	mtime := epoch.UTC().Truncate(time.Second)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	file := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := io.Copy(tw, bytes.NewReader(data))
		return err
	}
	for _, group := range []struct {
		prefix string
		files  map[string][]byte
	}{{"blobs/sha256/", blobs}, {"", top}} {
		names := make([]string, 0, len(group.files))
		for n := range group.files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := file(group.prefix+n, group.files[n]); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
