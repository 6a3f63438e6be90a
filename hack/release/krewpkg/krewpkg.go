// Package krewpkg writes the kubectl plugin's release archives and the krew
// manifest (plugins/agentrun.yaml) carrying their real sha256 sums in place
// of the committed placeholders.
package krewpkg

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentrun-dev/agentrun-operator/hack/release/imagebuild"
)

// Binary is the plugin's executable name, in its archive and in krew's bin.
const Binary = "kubectl-agentrun"

// ArchiveName is the release archive of a platform, as the manifest's uris
// name it.
func ArchiveName(p imagebuild.Platform) string {
	return Binary + "_" + p.OS + "_" + p.Arch + ".tar.gz"
}

// Archive is a gzipped tar holding the plugin binary alone, executable,
// its time the epoch.
func Archive(binary []byte, epoch time.Time) ([]byte, error) {
	raw, err := imagebuild.Tar([]imagebuild.File{{Path: Binary, Mode: 0o755, Data: binary}}, epoch)
	if err != nil {
		return nil, err
	}
	return imagebuild.Gzip(raw)
}

// Header replaces the committed manifest's comment (which explains its
// placeholder sums).
const Header = "Krew plugin manifest for `kubectl agentrun` (krew.sigs.k8s.io), written by\n" +
	"`make release`: each sha256 is that of the archive beside it."

// Manifest is the committed manifest src for a release of version: each
// platform in sums gets its archive's sha256; a platform of src with no
// archive is left out (a release that builds fewer platforms). It fails
// when the manifest's version or a uri does not name version, or a
// platform in sums has no entry.
func Manifest(src []byte, version string, sums map[imagebuild.Platform]string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("the manifest is not one YAML document")
	}
	root := doc.Content[0]
	spec := get(root, "spec")
	if v := get(spec, "version"); v == nil || v.Value != version {
		return nil, fmt.Errorf("the manifest's spec.version is not %s", version)
	}
	platforms := get(spec, "platforms")
	if platforms == nil || platforms.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("the manifest has no spec.platforms")
	}
	found := map[imagebuild.Platform]bool{}
	var kept []*yaml.Node
	for _, item := range platforms.Content {
		labels := get(get(item, "selector"), "matchLabels")
		os, arch := get(labels, "os"), get(labels, "arch")
		uri, sha := get(item, "uri"), get(item, "sha256")
		if os == nil || arch == nil || uri == nil || sha == nil {
			return nil, fmt.Errorf("a platform of the manifest lacks os, arch, uri or sha256")
		}
		p := imagebuild.Platform{OS: os.Value, Arch: arch.Value}
		if want := "/" + version + "/" + ArchiveName(p); !strings.HasSuffix(uri.Value, want) {
			return nil, fmt.Errorf("%s: uri %s does not end in %s", p, uri.Value, want)
		}
		sum, ok := sums[p]
		if !ok {
			continue
		}
		found[p] = true
		sha.Value, sha.Style, sha.LineComment = sum, yaml.DoubleQuotedStyle, ""
		kept = append(kept, item)
	}
	for p := range sums {
		if !found[p] {
			return nil, fmt.Errorf("the manifest has no platform %s", p)
		}
	}
	platforms.Content = kept
	// The committed comment sits on the document or its first key.
	doc.HeadComment, root.HeadComment = Header, ""
	if len(root.Content) > 0 {
		root.Content[0].HeadComment = ""
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// get is a mapping node's value at key, or nil.
func get(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
