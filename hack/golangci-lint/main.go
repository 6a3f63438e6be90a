// Command golangci-lint is golangci-lint at the version go.mod pins, with the
// kube-api-linter module plugin compiled in. It is what `golangci-lint custom`
// would build from .custom-gcl.yml, except that custom clones golangci-lint's
// Git repository, while this module builds from the Go module proxy alone
// (`make lint` builds it into bin/).
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// The module plugin: registers the "kubeapilinter" linter that
	// .golangci.yml declares under linters.settings.custom.
	_ "sigs.k8s.io/kube-api-linter"
)

func main() {
	if err := commands.Execute(buildInfo()); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "golangci-lint: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}

// buildInfo reports the pinned golangci-lint and kube-api-linter versions,
// read from the binary's module information.
func buildInfo() commands.BuildInfo {
	info := commands.BuildInfo{Version: "unknown", Commit: "?", Date: "(unknown)", GoVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	kal := "unknown"
	for _, dep := range bi.Deps {
		switch dep.Path {
		case "github.com/golangci/golangci-lint/v2":
			info.Version = strings.TrimPrefix(dep.Version, "v")
		case "sigs.k8s.io/kube-api-linter":
			kal = dep.Version
		}
	}
	info.Commit = "kube-api-linter " + kal
	return info
}
