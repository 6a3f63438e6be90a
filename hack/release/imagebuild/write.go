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
	blobs := map[string][]byte{}
	add := func(h v1.Hash, r io.ReadCloser) error {
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		blobs[h.Hex] = b
		return nil
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	blobs[digest.Hex] = rawManifest
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	blobs[configName.Hex] = rawConfig
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	dm := dockerManifest{Config: "blobs/sha256/" + configName.Hex, RepoTags: []string{tag.Name()}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		if err := add(d, rc); err != nil {
			return err
		}
		dm.Layers = append(dm.Layers, "blobs/sha256/"+d.Hex)
	}
	manifestJSON, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return err
	}
	size, err := img.Size()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{
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
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	mtime := epoch.UTC().Truncate(time.Second)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	hexes := make([]string, 0, len(blobs))
	for h := range blobs {
		hexes = append(hexes, h)
	}
	sort.Strings(hexes)
	file := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := io.Copy(tw, bytes.NewReader(data))
		return err
	}
	for _, h := range hexes {
		if err := file("blobs/sha256/"+h, blobs[h]); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"index.json", indexJSON},
		{"manifest.json", manifestJSON},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	} {
		if err := file(f.name, f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
