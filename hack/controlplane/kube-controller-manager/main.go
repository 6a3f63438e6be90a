// Command kube-controller-manager is the upstream controller manager at the
// same version as the API server. The local control plane runs only its
// garbage collector and namespace controller, so owner references and
// namespace deletion behave in tests and `make run` as in a cluster.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
