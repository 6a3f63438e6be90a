package main_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// TestDockerfileBuildsAStaticBinary keeps the Dockerfile honest on machines
// without a Docker engine: it runs the Dockerfile's own `go build` line and
// checks the result is a static binary the distroless image can run, and
// that the final stage is distroless and non-root.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	root := testenv.RepoRoot()
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	m := regexp.MustCompile(`(?s)RUN (CGO_ENABLED=0 GOOS=\$\{TARGETOS\} GOARCH=\$\{TARGETARCH\} \\\s*go build [^\n]*)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("Dockerfile has no static `go build` of the manager")
	}
	for _, want := range []string{"FROM gcr.io/distroless/static:nonroot", "USER 65532:65532", `ENTRYPOINT ["/manager"]`, "-trimpath", `-ldflags="-s -w"`, "./cmd/manager"} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	out := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/manager")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the manager binary is dynamically linked; distroless/static cannot run it")
		}
	}
	if syms, _ := f.DynamicSymbols(); len(syms) > 0 {
		t.Errorf("the manager binary imports %d dynamic symbols", len(syms))
	}
}
