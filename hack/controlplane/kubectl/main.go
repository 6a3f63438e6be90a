// Command kubectl is the upstream kubectl at the same version as the API server,
// so tests run exactly what users type.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Client auth plugins, as upstream kubectl registers them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
	os.Exit(0)
}
