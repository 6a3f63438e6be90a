package sbom

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWrite: the SBOM of an image holding this test binary names the image
// (a container at its version and platform), the binary as an application
// depending on every module it links (go-containerregistry, Go's standard
// library among them) at the versions it was built with, and the CA bundle
// with its Debian package and sha256; the same inputs give the same bytes.
func TestWrite(t *testing.T) {
	// A test binary records no modules: build the release command, which
	// links go-containerregistry.
	exe := filepath.Join(t.TempDir(), "release")
	if out, err := exec.Command("go", "build", "-o", exe, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	img := Image{Name: "registry.example/agentrun-operator", Version: "v9.9.9", OS: "linux", Arch: "amd64",
		Epoch: time.Unix(1767225600, 0), Binaries: []Binary{{Path: "/manager", File: exe}},
		CA: CABundle{Path: "/etc/ssl/certs/ca-certificates.crt", Data: []byte("pem"), Package: "ca-certificates", Version: "20230311+deb12u1"}}
	doc, err := Write(img)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat, SpecVersion, SerialNumber string
		Metadata                             struct {
			Timestamp string
			Component struct {
				Type, Name, Version string
				BOMRef              string `json:"bom-ref"`
			}
		}
		Components []struct {
			BOMRef  string `json:"bom-ref"`
			Type    string
			Name    string
			Version string
			PURL    string `json:"purl"`
			Hashes  []struct{ Alg, Content string }
		}
		Dependencies []struct {
			Ref       string
			DependsOn []string
		}
	}
	if err := json.Unmarshal(doc, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.6" || bom.SerialNumber != "" || bom.Metadata.Timestamp != "2026-01-01T00:00:00Z" ||
		bom.Metadata.Component.Type != "container" || bom.Metadata.Component.Name != img.Name || bom.Metadata.Component.Version != "v9.9.9" {
		t.Errorf("header %+v %+v", bom.BOMFormat, bom.Metadata)
	}
	found := map[string]string{}
	var app, ca string
	for _, c := range bom.Components {
		found[c.Name] = c.Version
		switch {
		case c.Name == "/manager" && c.Type == "application":
			app = c.BOMRef
		case c.Type == "file" && c.PURL == "pkg:deb/debian/ca-certificates@20230311+deb12u1?arch=all" && len(c.Hashes) == 1 &&
			c.Hashes[0].Content == "f0aeace912cf19dc1c6fffd41de6e395daeb5462f1221945706bd0674c3005eb": // sha256 of "pem"
			ca = c.BOMRef
		}
	}
	if app == "" || ca == "" {
		t.Fatalf("no application /manager or CA bundle component in %s", doc)
	}
	if v := found["github.com/google/go-containerregistry"]; v != "v0.22.1" {
		t.Errorf("go-containerregistry at %q", v)
	}
	if v := found["std"]; !strings.HasPrefix(v, "go1.") {
		t.Errorf("the standard library at %q", v)
	}
	deps := map[string][]string{}
	for _, d := range bom.Dependencies {
		deps[d.Ref] = d.DependsOn
	}
	if top := deps[bom.Metadata.Component.BOMRef]; len(top) != 2 || top[0] != app || top[1] != ca {
		t.Errorf("the image depends on %v", top)
	}
	if n := len(deps[app]); n != len(bom.Components)-2 {
		t.Errorf("/manager depends on %d of %d modules", n, len(bom.Components)-2)
	}
	again, err := Write(img)
	if err != nil || !bytes.Equal(again, doc) {
		t.Errorf("the same image gave another SBOM (%v)", err)
	}
}
