// Command kubectl-agentrun is the kubectl plugin `kubectl agentrun`. All of
// its logic is in internal/plugin.
package main

import (
	"os"

	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
)

func main() {
	os.Exit(plugin.Main(os.Args, os.Stdout, os.Stderr))
}
