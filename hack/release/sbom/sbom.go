// Package sbom writes the CycloneDX SBOM that goes beside each image: the
// Go modules linked into each of the image's binaries, read from the build
// information Go embeds in them (cyclonedx-gomod's "bin" generator, as its
// library), and the CA bundle, as one document about the container image.
//
// The document carries no serial number and the given epoch as its time,
// so the same binaries give the same bytes.
package sbom

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/rs/zerolog"
)

// Binary is one executable of the image.
type Binary struct {
	// Path is where it is in the image ("/manager").
	Path string
	// File is where it is on this machine, for its build information.
	File string
}

// CABundle is the image's CA bundle and the Debian package it comes from.
type CABundle struct {
	Path string // in the image
	Data []byte
	// Package and Version name its Debian package; Version may be empty
	// where dpkg does not know it.
	Package, Version string
}

// Image describes the container image the SBOM is about.
type Image struct {
	// Name is the image's repository (ghcr.io/agentrun-dev/agentrun-operator).
	Name, Version string
	OS, Arch      string
	Epoch         time.Time
	Binaries      []Binary
	CA            CABundle
}

// Generator is the name cyclonedx-gomod is recorded under as the SBOM's tool.
const Generator = "github.com/CycloneDX/cyclonedx-gomod"

// Write returns the image's SBOM as CycloneDX 1.6 JSON.
func Write(img Image) ([]byte, error) {
	imageRef := "image:" + img.Name + ":" + img.Version + "?os=" + img.OS + "&arch=" + img.Arch
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: img.Epoch.UTC().Format(time.RFC3339),
		Tools:     &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: Generator, Version: moduleVersion(Generator)}}},
		Component: &cdx.Component{
			BOMRef: imageRef, Type: cdx.ComponentTypeContainer, Name: img.Name, Version: img.Version,
			Properties: &[]cdx.Property{{Name: "oci:os", Value: img.OS}, {Name: "oci:architecture", Value: img.Arch}},
		},
	}
	apps, deps, modules, err := binaries(img.Binaries)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(img.CA.Data)
	ca := cdx.Component{
		BOMRef: "file:" + img.CA.Path, Type: cdx.ComponentTypeFile, Name: img.CA.Path,
		Description: "CA certificates, from Debian's " + img.CA.Package + " package",
		Hashes:      &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
	}
	if img.CA.Version != "" {
		ca.Version = img.CA.Version
		ca.PackageURL = "pkg:deb/debian/" + img.CA.Package + "@" + img.CA.Version + "?arch=all"
	}

	var components []cdx.Component
	var top []string
	for _, a := range apps {
		components = append(components, a)
		top = append(top, a.BOMRef)
	}
	components = append(components, ca)
	top = append(top, ca.BOMRef)
	var mods []cdx.Component
	for _, c := range modules {
		mods = append(mods, c)
	}
	slices.SortFunc(mods, func(a, b cdx.Component) int { return cmp.Compare(a.BOMRef, b.BOMRef) })
	components = append(components, mods...)
	bom.Components = &components

	dependencies := []cdx.Dependency{{Ref: imageRef, Dependencies: &top}}
	for _, a := range apps {
		refs := deps[a.BOMRef]
		dependencies = append(dependencies, cdx.Dependency{Ref: a.BOMRef, Dependencies: &refs})
	}
	for _, c := range mods {
		dependencies = append(dependencies, cdx.Dependency{Ref: c.BOMRef})
	}
	bom.Dependencies = &dependencies

	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).SetEscapeHTML(false).EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// binaries are the binaries' application components, the modules each
// depends on (by bom-ref), and every module, by bom-ref.
func binaries(bs []Binary) ([]cdx.Component, map[string][]string, map[string]cdx.Component, error) {
	modules := map[string]cdx.Component{}
	var apps []cdx.Component
	deps := map[string][]string{}
	for _, b := range bs {
		g, err := bin.NewGenerator(b.File, bin.WithIncludeStdlib(true), bin.WithLogger(zerolog.Nop()))
		if err != nil {
			return nil, nil, nil, err
		}
		part, err := g.Generate()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", b.File, err)
		}
		app := *part.Metadata.Component
		app.Name = b.Path
		// The generator describes the binary in its metadata's properties
		// (GOOS, GOARCH, vcs.revision, its hashes); here it is one
		// component of the image, and they are the component's.
		if part.Metadata.Properties != nil {
			props := slices.DeleteFunc(slices.Clone(*part.Metadata.Properties), func(p cdx.Property) bool { return p.Name == "cdx:gomod:binary:name" })
			app.Properties = &props
		}
		if _, dup := deps[app.BOMRef]; dup || app.BOMRef == "" {
			return nil, nil, nil, fmt.Errorf("%s: bom-ref %q is not its own", b.File, app.BOMRef)
		}
		var refs []string
		for _, c := range *part.Components {
			if prev, ok := modules[c.BOMRef]; ok && prev.Version != c.Version {
				return nil, nil, nil, fmt.Errorf("%s at %s and %s", c.Name, prev.Version, c.Version)
			}
			modules[c.BOMRef] = c
			refs = append(refs, c.BOMRef)
		}
		slices.Sort(refs)
		deps[app.BOMRef] = refs
		apps = append(apps, app)
	}
	return apps, deps, modules, nil
}

// moduleVersion is the version of the module at path this program was
// built with.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "unknown"
}
