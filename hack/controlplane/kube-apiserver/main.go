// Command kube-apiserver is the upstream API server, built from k8s.io/kubernetes
// so that tests run against the real thing without downloading a binary.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
