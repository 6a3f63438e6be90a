package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
)

// egressPolicy is the manager's egress policy: the flags' Config merged
// with the cluster admin's ConfigMap, rebuilt whenever the ConfigMap
// changes. Every outbound client a step uses comes from client, so an edit
// applies to the next connection. A policy is immutable; a change swaps in
// a new one and closes the old one's idle connections (requests in flight
// finish on the connection they have).
type egressPolicy struct {
	flags egress.Config
	opts  []egress.Option
	cm    types.NamespacedName
	cur   atomic.Pointer[egress.Policy]
	log   logr.Logger
}

// client is Deps.HTTP: the client for calls made on behalf of namespace.
func (e *egressPolicy) client(namespace string) *http.Client {
	return e.cur.Load().Client(namespace)
}

// apply builds the policy from the flags and cm (nil: the flags alone)
// and swaps it in. A ConfigMap that does not parse changes nothing.
func (e *egressPolicy) apply(cm *corev1.ConfigMap) error {
	var admin *egress.Config
	if cm != nil {
		c, err := egress.ParseConfigMap(cm.Data)
		if err != nil {
			return fmt.Errorf("egress ConfigMap %s: %w", e.cm, err)
		}
		admin = c
	}
	cfg := egress.Merge(&e.flags, admin)
	p, err := egress.New(cfg, e.opts...)
	if err != nil {
		return err
	}
	if old := e.cur.Swap(p); old != nil {
		old.CloseIdleConnections()
	}
	e.log.Info("Egress policy in force", "configMap", e.cm.String(), "fromConfigMap", cm != nil,
		"allowCIDRs", len(cfg.AllowCIDRs), "denyCIDRs", len(cfg.DenyCIDRs), "allowHosts", len(cfg.AllowHosts),
		"denyHosts", len(cfg.DenyHosts), "namespaceExceptions", len(cfg.Namespaces))
	return nil
}

// newEgressPolicy builds the policy in force at start: the API server's
// and the manager pod's own addresses protected, the flags, and the
// ConfigMap if it exists. A ConfigMap that exists but does not parse (or
// cannot be read) stops the manager from starting: running with less than
// the admin's denies would fail open.
func newEgressPolicy(ctx context.Context, cfg *rest.Config, o Options, reader client.Reader, log logr.Logger) (*egressPolicy, error) {
	e := &egressPolicy{flags: o.Egress, cm: o.EgressConfigMap, log: log}
	if err := e.flags.Validate(); err != nil {
		return nil, err
	}
	api, err := egress.APIServerPrefixes(ctx, cfg.Host, nil)
	if err != nil {
		return nil, err
	}
	api = append(api, apiServerEndpoints(ctx, reader, log)...)
	pod, err := egress.LocalInterfacePrefixes()
	if err != nil {
		return nil, err
	}
	e.opts = append([]egress.Option{
		egress.WithAPIServerPrefixes(api),
		egress.WithManagerPodPrefixes(pod),
		egress.WithOnRefusal(func(r *egress.Refusal) {
			metrics.EgressRefusals.WithLabelValues(r.Namespace, r.Rule, r.Stage).Inc()
		}),
	}, o.EgressOptions...)
	log.Info("Egress policy protects the API server and the manager pod", "apiServer", prefixStrings(api), "managerPod", prefixStrings(pod))
	cm, err := e.read(ctx, reader)
	if err != nil {
		return nil, err
	}
	if err := e.apply(cm); err != nil {
		return nil, err
	}
	return e, nil
}

// read gets the ConfigMap (nil when none is named or it does not exist).
func (e *egressPolicy) read(ctx context.Context, reader client.Reader) (*corev1.ConfigMap, error) {
	if e.cm.Name == "" {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, e.cm, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the egress ConfigMap %s: %w", e.cm, err)
	}
	return cm, nil
}

// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get,resourceNames=kubernetes

// apiServerEndpoints are the API servers' own addresses (the EndpointSlice
// default/kubernetes, which the API servers keep), which reach the API
// server around its Service address. Best effort: without the permission
// (a namespace-scoped install without the optional Role in default), only
// the address the manager connects to is protected.
func apiServerEndpoints(ctx context.Context, reader client.Reader, log logr.Logger) []netip.Prefix {
	var s discoveryv1.EndpointSlice
	if err := reader.Get(ctx, types.NamespacedName{Namespace: corev1.NamespaceDefault, Name: "kubernetes"}, &s); err != nil {
		log.Info("Could not read the API server's endpoints; protecting only the address the manager connects to (deny the others with --egress-deny-cidr)", "error", err.Error())
		return nil
	}
	var addrs []netip.Addr
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				addrs = append(addrs, ip)
			}
		}
	}
	return egress.AddrPrefixes(addrs)
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// egressWatch re-applies the policy whenever the admin's ConfigMap is
// created, edited or deleted, through a watch on that one ConfigMap (a
// field selector on its name), apart from the manager's caches. It runs on
// every replica, leader or not: each one's steps must follow the policy.
// An edit that does not parse keeps the policy in force and is reported as
// a Warning Event on the ConfigMap and in the log.
type egressWatch struct {
	e        *egressPolicy
	cfg      *rest.Config
	recorder events.EventRecorder
}

func (w *egressWatch) NeedLeaderElection() bool { return false }

func (w *egressWatch) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(w.cfg)
	if err != nil {
		return err
	}
	lw := toolscache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", w.e.cm.Namespace,
		fields.OneTermEqualSelector("metadata.name", w.e.cm.Name))
	_, ctrl := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.changed(obj) },
			UpdateFunc: func(_, obj any) { w.changed(obj) },
			DeleteFunc: func(any) { w.changed(nil) },
		},
	})
	ctrl.RunWithContext(ctx)
	return nil
}

func (w *egressWatch) changed(obj any) {
	cm, _ := obj.(*corev1.ConfigMap)
	if err := w.e.apply(cm); err != nil {
		w.e.log.Error(err, "The egress ConfigMap does not parse; the policy in force is kept until it does")
		if cm != nil && w.recorder != nil {
			w.recorder.Eventf(cm, nil, corev1.EventTypeWarning, "EgressConfigInvalid", "ApplyEgressPolicy",
				"Not applied, the previous egress policy stays in force: %v", err)
		}
	}
}

// namedReplica adds the replica's name (shards.ReplicaHeader) to every
// request of the clients it returns.
func namedReplica(clients func(namespace string) *http.Client, identity string) func(namespace string) *http.Client {
	return func(namespace string) *http.Client {
		c := *clients(namespace)
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c.Transport = replicaHeader{identity: identity, next: base}
		return &c
	}
}

type replicaHeader struct {
	identity string
	next     http.RoundTripper
}

func (t replicaHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(shards.ReplicaHeader, t.identity)
	return t.next.RoundTrip(req)
}
