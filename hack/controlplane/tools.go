//go:build tools

// Package tools pins the etcd server main package so `go build go.etcd.io/etcd/server/v3`
// resolves at the version k8s.io/kubernetes itself was tested with.
package tools

import _ "go.etcd.io/etcd/server/v3"
