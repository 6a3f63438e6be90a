package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// serveHistory runs the history server (docs/history.md) on loopback
// behind the local control plane's aggregation layer, reading the store
// the manager writes, so kubectl agentrun transcript and output, history,
// cost and the console read the journals and records the database holds
// as they would in a cluster. kubeconfig is the control plane's admin's
// (the server's delegated authentication and authorization ask with it).
func serveHistory(ctx context.Context, env *testenv.Env, dsn, kubeconfig string) error {
	if !strings.HasPrefix(dsn, "sqlite:") && !strings.HasPrefix(dsn, "postgres") {
		return nil // ConfigMaps: no archive to serve
	}
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	ns := testenv.SystemNamespace
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := env.ApplyDir(filepath.Join(testenv.RepoRoot(), "config", "history")); err != nil {
		return fmt.Errorf("applying config/history: %w", err)
	}
	// The aggregator reaches the server on loopback through an
	// ExternalName Service (endpoints may not hold loopback addresses).
	if err := kube.CoreV1().Services(ns).Delete(ctx, "agentrun-history", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-history", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	ln, port, err := history.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"service":{"port":%d}}}`, port)
	if _, err := dyn.Resource(apiServices).Patch(ctx, history.APIServiceName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	o := history.NewOptions()
	o.SecureServing.Listener, o.SecureServing.BindPort = ln, port
	o.Authentication.RemoteKubeConfigFile, o.Authorization.RemoteKubeConfigFile = kubeconfig, kubeconfig
	o.Store = dsn
	o.Certs = history.CertOptions{Namespace: ns, SecretName: "agentrun-history-cert", Service: "agentrun-history", Kubeconfig: kubeconfig}
	s, err := o.New(ctx)
	if err != nil {
		return fmt.Errorf("starting the history server: %w", err)
	}
	go func() { _ = s.Run(ctx) }()
	fmt.Printf(">> The history API (history.agentrun.dev) is served on 127.0.0.1:%d behind the control plane: kubectl agentrun history, cost, and the transcripts and outputs of database journals.\n", port)
	return nil
}
