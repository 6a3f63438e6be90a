// Command kubectl-agentrun is the kubectl plugin `kubectl agentrun`. All of
// its logic is in internal/plugin, and its web console in internal/console.
package main

import (
	"os"

	"github.com/agentrun-dev/agentrun-operator/internal/console"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
)

func main() {
	plugin.ConsoleServer = console.ServeCommand
	os.Exit(plugin.Main(os.Args, os.Stdout, os.Stderr))
}
