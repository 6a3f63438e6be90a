package manager

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The metrics endpoint, when secure, asks the API server who a scraper is
// (TokenReview) and whether it may get /metrics (SubjectAccessReview):
// the grant a Prometheus needs is the metrics-reader ClusterRole
// (config/rbac/metrics_reader_role.yaml).
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// MetricsOptions say how the Prometheus endpoint is served.
type MetricsOptions struct {
	// BindAddress is where it listens; "0" turns it off.
	BindAddress string
	// Secure serves it over HTTPS and answers only scrapers the API server
	// authenticates and authorizes for GET /metrics. Off, it is plain HTTP
	// open to anyone who reaches the port (the local runner, tests).
	Secure bool
	// CertDir holds tls.crt and tls.key (e.g. a cert-manager Secret),
	// reloaded when they change; empty or without them, a self-signed
	// certificate is made in memory at start.
	CertDir string
}

// metricsServer turns the options into controller-runtime's.
func metricsServer(o MetricsOptions) metricsserver.Options {
	s := metricsserver.Options{BindAddress: o.BindAddress}
	if !o.Secure {
		return s
	}
	s.SecureServing = true
	s.FilterProvider = filters.WithAuthenticationAndAuthorization
	s.CertDir = o.CertDir
	// HTTP/1.1 only: HTTP/2's stream handling has had denial-of-service
	// flaws (CVE-2023-44487, CVE-2023-39325) and a scrape gains nothing
	// from it.
	s.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return s
}
