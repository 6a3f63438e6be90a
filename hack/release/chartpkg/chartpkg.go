// Package chartpkg packages the Helm chart as `helm package` would (a
// gzipped tar of the chart's files under a directory named after it,
// leaving out what .helmignore names), with the image pinned by digest in
// its values.yaml, and reproducibly: entries sorted, their time the given
// epoch, no name or time in the gzip header. `helm package` stamps the
// current time on every entry, so the same chart would never give the same
// archive twice.
package chartpkg

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentrun-dev/agentrun-operator/hack/release/imagebuild"
)

// Chart is the part of Chart.yaml the package is named by.
type Chart struct {
	Name       string `yaml:"name"`
	Version    string `yaml:"version"`
	AppVersion string `yaml:"appVersion"`
}

// ReadChart reads dir/Chart.yaml.
func ReadChart(dir string) (Chart, error) {
	var c Chart
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return c, err
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s/Chart.yaml: %w", dir, err)
	}
	if c.Name == "" || c.Version == "" {
		return c, fmt.Errorf("%s/Chart.yaml has no name or version", dir)
	}
	return c, nil
}

// FileName is the package's name, as `helm package` names it.
func (c Chart) FileName() string { return c.Name + "-" + c.Version + ".tgz" }

// Ignore holds the patterns of a .helmignore. Only what this chart's uses
// is understood (a glob on a file's base name, a directory name ending in
// a slash); anything else fails rather than be read differently from Helm.
type Ignore struct{ files, dirs []string }

// ReadIgnore reads dir/.helmignore; a chart without one ignores nothing.
func ReadIgnore(dir string) (Ignore, error) {
	var ig Ignore
	b, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if os.IsNotExist(err) {
		return ig, nil
	} else if err != nil {
		return ig, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.ContainsAny(line, "!") || strings.Contains(line, "**") || strings.Contains(strings.TrimSuffix(line, "/"), "/"):
			return ig, fmt.Errorf(".helmignore: %q is a pattern this packager does not read as Helm does", line)
		case strings.HasSuffix(line, "/"):
			ig.dirs = append(ig.dirs, strings.TrimSuffix(line, "/"))
		default:
			if _, err := path.Match(line, ""); err != nil {
				return ig, fmt.Errorf(".helmignore: %q: %w", line, err)
			}
			ig.files = append(ig.files, line)
		}
	}
	return ig, sc.Err()
}

// Ignored tells whether rel (a slash path inside the chart) is left out.
func (ig Ignore) Ignored(rel string) bool {
	parts := strings.Split(rel, "/")
	for _, d := range parts[:len(parts)-1] {
		for _, p := range ig.dirs {
			if ok, _ := path.Match(p, d); ok {
				return true
			}
		}
	}
	for _, p := range ig.files {
		if ok, _ := path.Match(p, parts[len(parts)-1]); ok {
			return true
		}
	}
	// Helm's own rule: no hidden files under templates/.
	return len(parts) > 1 && parts[0] == "templates" && strings.HasPrefix(parts[len(parts)-1], ".")
}

var (
	imageBlock = regexp.MustCompile(`(?m)^image:\n((?:[ \t]+.*\n|[ \t]*\n)*)`)
	repoLine   = regexp.MustCompile(`(?m)^(  repository: ).*$`)
	digestLine = regexp.MustCompile(`(?m)^(  digest: ).*$`)
)

// PinImage rewrites values.yaml's image.repository and image.digest, keeping
// every other line (and comment) as it is.
func PinImage(values []byte, repository, digest string) ([]byte, error) {
	loc := imageBlock.FindSubmatchIndex(values)
	if loc == nil {
		return nil, fmt.Errorf("values.yaml has no top-level image: block")
	}
	block := values[loc[2]:loc[3]]
	if len(repoLine.FindAll(block, -1)) != 1 || len(digestLine.FindAll(block, -1)) != 1 {
		return nil, fmt.Errorf("values.yaml's image: block lacks one repository: and one digest: line")
	}
	block = repoLine.ReplaceAll(block, []byte("${1}"+repository))
	block = digestLine.ReplaceAll(block, []byte(`${1}"`+digest+`"`))
	out := append(append(append([]byte{}, values[:loc[2]]...), block...), values[loc[3]:]...)
	var v struct {
		Image struct{ Repository, Digest string } `yaml:"image"`
	}
	if err := yaml.Unmarshal(out, &v); err != nil || v.Image.Repository != repository || v.Image.Digest != digest {
		return nil, fmt.Errorf("pinning values.yaml's image gave repository %q digest %q (%v)", v.Image.Repository, v.Image.Digest, err)
	}
	return out, nil
}

// Package writes the chart in dir, made of files (slash paths relative to
// dir, as git lists them), to the archive's bytes, its values.yaml's image
// pinned to repository@digest.
func Package(dir string, files []string, repository, digest string, epoch time.Time) ([]byte, error) {
	chart, err := ReadChart(dir)
	if err != nil {
		return nil, err
	}
	ig, err := ReadIgnore(dir)
	if err != nil {
		return nil, err
	}
	var entries []imagebuild.File
	dirs := map[string]bool{}
	pinned := false
	for _, rel := range files {
		if ig.Ignored(rel) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		if rel == "values.yaml" {
			if data, err = PinImage(data, repository, digest); err != nil {
				return nil, err
			}
			pinned = true
		}
		name := chart.Name + "/" + rel
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
		entries = append(entries, imagebuild.File{Path: name, Mode: 0o644, Data: data})
	}
	if !pinned {
		return nil, fmt.Errorf("%s has no values.yaml", dir)
	}
	for d := range dirs {
		entries = append(entries, imagebuild.File{Path: d, Dir: true, Mode: 0o755})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	raw, err := imagebuild.Tar(entries, epoch)
	if err != nil {
		return nil, err
	}
	return imagebuild.Gzip(raw)
}
