// Command release assembles the release artifacts from binaries the
// Makefile has built (docs/releasing.md):
//
//	release image  writes the manager image: an OCI layout of the
//	               multi-platform index, a docker-load/kind-load archive
//	               and a CycloneDX SBOM per platform (make image)
//	release push   pushes the OCI layout's index to a registry and prints
//	               its digest (make image-push)
//	release dist   writes the packaged chart pinned to the image's digest,
//	               the plugin archives, the krew manifest and checksums.txt
//	               (make release)
//
// Every artifact's time is SOURCE_DATE_EPOCH (the commit's time unless set),
// so the same commit gives the same bytes.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentrun-dev/agentrun-operator/hack/release/chartpkg"
	"github.com/agentrun-dev/agentrun-operator/hack/release/imagebuild"
	"github.com/agentrun-dev/agentrun-operator/hack/release/krewpkg"
	"github.com/agentrun-dev/agentrun-operator/hack/release/sbom"
)

// Binaries are the image's executables, at its root; the first is the
// entrypoint.
var Binaries = []string{"manager", "kubectl-agentrun"}

// The image config's labels beyond the OCI ones: the SBOM beside the image
// and its sha256.
const (
	LabelSBOM       = "dev.agentrun.sbom"
	LabelSBOMSHA256 = "dev.agentrun.sbom.sha256"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release image|push|dist [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "image":
		err = imageCmd(os.Args[2:])
	case "push":
		err = pushCmd(os.Args[2:])
	case "dist":
		err = distCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: image, push or dist", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// common are the flags every command shares.
type common struct {
	repo, bin, image, version string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.repo, "repo", ".", "the repository's root (for git and the chart)")
	fs.StringVar(&c.bin, "bin", "", "directory of the built binaries, one OS_ARCH directory per platform")
	fs.StringVar(&c.image, "image", "ghcr.io/agentrun-dev/agentrun-operator", "the image's repository")
	fs.StringVar(&c.version, "version", "", "the release's version (its tag), e.g. v0.1.0")
}

func (c *common) tag() (name.Tag, error) {
	if c.version == "" {
		return name.Tag{}, errors.New("-version is required")
	}
	return name.NewTag(c.image + ":" + c.version)
}

// imageBase is the file name the image's files start with.
func (c *common) imageBase(p imagebuild.Platform) string {
	return path.Base(c.image) + "_" + c.version + "_" + p.OS + "_" + p.Arch
}

func platforms(s string) ([]imagebuild.Platform, error) {
	var ps []imagebuild.Platform
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		p, err := imagebuild.ParsePlatform(f)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, errors.New("no platforms")
	}
	return ps, nil
}

// epoch is SOURCE_DATE_EPOCH, or else the time of the commit checked out.
func epoch(repo string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		out, err := git(repo, "log", "-1", "--format=%ct", "HEAD")
		if err != nil {
			return time.Time{}, err
		}
		s = strings.TrimSpace(out)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// revision is the commit checked out, with "-dirty" when tracked files
// differ from it.
func revision(repo string) (string, error) {
	rev, err := git(repo, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	rev = strings.TrimSpace(rev)
	status, err := git(repo, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(status) != "" {
		rev += "-dirty"
	}
	return rev, nil
}

func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// debVersion is the installed version of a Debian package, or "" where
// dpkg does not know it.
func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func imageCmd(args []string) error {
	fs := flag.NewFlagSet("release image", flag.ExitOnError)
	var o imageOptions
	o.register(fs)
	out := fs.String("out", "dist/image", "directory to write the image's files to")
	plats := fs.String("platforms", "linux/amd64,linux/arm64", "the image's platforms")
	fs.StringVar(&o.source, "source", "https://github.com/agentrun-dev/agentrun-operator", "org.opencontainers.image.source")
	fs.StringVar(&o.licenses, "licenses", "", "org.opencontainers.image.licenses (an SPDX expression)")
	caDir := fs.String("ca-certificates", imagebuild.DebianCAs, "the directory of CA certificates (*.crt) the image's bundle is made of: Debian's ca-certificates package's")
	_ = fs.Parse(args)
	tag, err := o.tag()
	if err != nil {
		return err
	}
	if o.licenses == "" {
		return errors.New("-licenses is required")
	}
	ps, err := platforms(*plats)
	if err != nil {
		return err
	}
	if o.epoch, err = epoch(o.repo); err != nil {
		return err
	}
	if o.revision, err = revision(o.repo); err != nil {
		return err
	}
	if o.ca, err = imagebuild.CABundle(*caDir); err != nil {
		return err
	}
	if o.base, err = imagebuild.Layer(imagebuild.BaseFiles(o.ca), o.epoch); err != nil {
		return err
	}
	o.out = *out
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var images []v1.Image
	for _, p := range ps {
		img, err := o.platformImage(p, tag)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		images = append(images, img)
	}
	idx, err := imagebuild.Index(ps, images)
	if err != nil {
		return err
	}
	if err := imagebuild.WriteLayout(filepath.Join(o.out, "oci"), idx, tag); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "digest"), []byte(d.String()+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf(">> %s@%s (%s) in %s\n", tag.Name(), d, *plats, o.out)
	return nil
}

// imageOptions is what every platform's image is made with.
type imageOptions struct {
	common
	out, source, licenses, revision string
	epoch                           time.Time
	ca                              []byte
	base                            v1.Layer
}

// platformImage writes p's SBOM and archive and returns its image.
func (o *imageOptions) platformImage(p imagebuild.Platform, tag name.Tag) (v1.Image, error) {
	dir := filepath.Join(o.bin, p.OS+"_"+p.Arch)
	bins := map[string][]byte{}
	var sb []sbom.Binary
	for _, b := range Binaries {
		data, err := os.ReadFile(filepath.Join(dir, b))
		if err != nil {
			return nil, err
		}
		bins[b] = data
		sb = append(sb, sbom.Binary{Path: "/" + b, File: filepath.Join(dir, b)})
	}
	doc, err := sbom.Write(sbom.Image{Name: path.Base(o.image), Version: o.version, OS: p.OS, Arch: p.Arch, Epoch: o.epoch, Binaries: sb,
		CA: sbom.CABundle{Path: "/" + imagebuild.CABundlePath, Data: o.ca, Package: "ca-certificates", Version: debVersion("ca-certificates")}})
	if err != nil {
		return nil, err
	}
	sbomName := o.imageBase(p) + ".cdx.json"
	if err := os.WriteFile(filepath.Join(o.out, sbomName), doc, 0o644); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(doc)
	img, err := imagebuild.Image(imagebuild.Spec{Platform: p, Base: o.base, Binaries: bins, Epoch: o.epoch, Labels: map[string]string{
		"org.opencontainers.image.title":       path.Base(o.image),
		"org.opencontainers.image.description": "The agentrun-operator's manager (entrypoint) and kubectl-agentrun (the web console).",
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     o.epoch.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    o.licenses,
		LabelSBOM:                              sbomName,
		LabelSBOMSHA256:                        hex.EncodeToString(sum[:]),
	}})
	if err != nil {
		return nil, err
	}
	var archive bytes.Buffer
	if err := imagebuild.WriteArchive(&archive, img, p, tag, o.epoch); err != nil {
		return nil, err
	}
	return img, os.WriteFile(filepath.Join(o.out, o.imageBase(p)+".tar"), archive.Bytes(), 0o644)
}

func pushCmd(args []string) error {
	fs := flag.NewFlagSet("release push", flag.ExitOnError)
	var c common
	c.register(fs)
	layout := fs.String("layout", "dist/image/oci", "the OCI layout `release image` wrote")
	_ = fs.Parse(args)
	tag, err := c.tag()
	if err != nil {
		return err
	}
	idx, err := imagebuild.ReadLayout(*layout)
	if err != nil {
		return err
	}
	ref, err := imagebuild.Push(context.Background(), idx, tag)
	if err != nil {
		return err
	}
	fmt.Printf(">> pushed %s\n%s\n", tag.Name(), ref.Name())
	return nil
}

func distCmd(args []string) error {
	fs := flag.NewFlagSet("release dist", flag.ExitOnError)
	var c common
	c.register(fs)
	out := fs.String("out", "dist", "directory to write the release to")
	imageDir := fs.String("image-dir", "dist/image", "where `release image` wrote the image")
	plats := fs.String("plugin-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "the plugin archives' platforms")
	chart := fs.String("chart", "charts/agentrun-operator", "the Helm chart, relative to -repo")
	krew := fs.String("krew-manifest", "plugins/agentrun.yaml", "the krew manifest, relative to -repo")
	_ = fs.Parse(args)
	if _, err := c.tag(); err != nil {
		return err
	}
	ps, err := platforms(*plats)
	if err != nil {
		return err
	}
	when, err := epoch(c.repo)
	if err != nil {
		return err
	}
	idx, err := imagebuild.ReadLayout(filepath.Join(*imageDir, "oci"))
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	chartFile, err := c.packageChart(*chart, *out, digest.String(), when)
	if err != nil {
		return err
	}
	if err := c.pluginArchives(ps, *krew, *out, when); err != nil {
		return err
	}
	n, err := writeChecksums(*out, filepath.Join(*out, "build"))
	if err != nil {
		return err
	}
	fmt.Printf(">> %s: the chart %s (image %s@%s), %d plugin archives, %s, checksums.txt (%d files)\n",
		*out, chartFile, c.image, digest, len(ps), filepath.Base(*krew), n)
	return nil
}

// packageChart writes the chart at chart (relative to the repository),
// pinned to the image's digest, into out, and returns the file's name.
func (c *common) packageChart(chart, out, digest string, when time.Time) (string, error) {
	chartDir := filepath.Join(c.repo, chart)
	meta, err := chartpkg.ReadChart(chartDir)
	if err != nil {
		return "", err
	}
	if meta.AppVersion != c.version {
		return "", fmt.Errorf("%s/Chart.yaml's appVersion is %q, the release %s", chart, meta.AppVersion, c.version)
	}
	listed, err := git(c.repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", chart)
	if err != nil {
		return "", err
	}
	var files []string
	for _, f := range strings.Split(strings.TrimRight(listed, "\x00"), "\x00") {
		rel := strings.TrimPrefix(f, strings.TrimSuffix(filepath.ToSlash(chart), "/")+"/")
		if info, err := os.Lstat(filepath.Join(chartDir, filepath.FromSlash(rel))); err == nil && info.Mode().IsRegular() {
			files = append(files, rel)
		}
	}
	sort.Strings(files)
	pkg, err := chartpkg.Package(chartDir, files, c.image, digest, when)
	if err != nil {
		return "", err
	}
	return meta.FileName(), os.WriteFile(filepath.Join(out, meta.FileName()), pkg, 0o644)
}

// pluginArchives writes each platform's plugin archive into out, and the
// krew manifest (krew, relative to the repository) carrying their sums.
func (c *common) pluginArchives(ps []imagebuild.Platform, krew, out string, when time.Time) error {
	sums := map[imagebuild.Platform]string{}
	for _, p := range ps {
		bin, err := os.ReadFile(filepath.Join(c.bin, p.OS+"_"+p.Arch, krewpkg.Binary))
		if err != nil {
			return err
		}
		archive, err := krewpkg.Archive(bin, when)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, krewpkg.ArchiveName(p)), archive, 0o644); err != nil {
			return err
		}
		s := sha256.Sum256(archive)
		sums[p] = hex.EncodeToString(s[:])
	}
	src, err := os.ReadFile(filepath.Join(c.repo, krew))
	if err != nil {
		return err
	}
	manifest, err := krewpkg.Manifest(src, c.version, sums)
	if err != nil {
		return fmt.Errorf("%s: %w", krew, err)
	}
	return os.WriteFile(filepath.Join(out, filepath.Base(krew)), manifest, 0o644)
}

// ChecksumsFile lists the sha256 of every other file of the release, in
// sha256sum's format (`sha256sum -c checksums.txt` in the release's
// directory checks them).
const ChecksumsFile = "checksums.txt"

func writeChecksums(dir, skip string) (int, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == skip {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == ChecksumsFile {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := sha256.Sum256(data)
		lines = append(lines, hex.EncodeToString(s[:])+"  "+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return 0, err
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	return len(lines), os.WriteFile(filepath.Join(dir, ChecksumsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
