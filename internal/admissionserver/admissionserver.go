// Package admissionserver serves the manager's validating admission
// webhooks: a Registry maps each webhook's path (the one its
// +kubebuilder:webhook marker gives config/webhook) to its handler, and
// Server builds controller-runtime's webhook server for them. A validator
// that checks a spec, func(*Spec) field.ErrorList, is mounted with one
// line through ForSpec.
package admissionserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Registry maps a webhook's path to its handler.
type Registry map[string]admission.Handler

// Options say where and with which certificate the webhooks are served.
type Options struct {
	// Addr is host:port (":9443").
	Addr string
	// CertDir holds tls.crt and tls.key, reloaded when they change (a
	// cert-manager Secret); used when GetCertificate is nil.
	CertDir string
	// GetCertificate serves a certificate held in memory (webhookcert).
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// Server returns the webhook server serving every handler of r.
func Server(o Options, r Registry) (webhook.Server, error) {
	host, p, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("webhook address %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 {
		return nil, fmt.Errorf("webhook address %q: the port must be a number above 0", o.Addr)
	}
	tlsOpts := []func(*tls.Config){func(c *tls.Config) {
		// HTTP/1.1 only, as the metrics endpoint: HTTP/2's stream handling
		// has had denial-of-service flaws and the API server's calls gain
		// nothing from it.
		c.NextProtos = []string{"http/1.1"}
		c.GetCertificate = o.GetCertificate
	}}
	s := webhook.NewServer(webhook.Options{Host: host, Port: port, CertDir: o.CertDir, TLSOpts: tlsOpts})
	for _, path := range slices.Sorted(maps.Keys(r)) {
		s.Register(path, &webhook.Admission{Handler: r[path]})
	}
	return s, nil
}

// ForSpec adapts a spec validator to an admission handler for kind: the
// object's spec is decoded into S and refused with validate's errors, as
// the API server refuses an Invalid object (kubectl prints each field).
// Deletes are not sent to it (the webhook marker's verbs).
func ForSpec[S any](kind schema.GroupKind, validate func(*S) field.ErrorList) admission.Handler {
	return specValidator[S]{kind: kind, validate: validate}
}

type specValidator[S any] struct {
	kind     schema.GroupKind
	validate func(*S) field.ErrorList
}

func (v specValidator[S]) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != v.kind.Group || req.Kind.Kind != v.kind.Kind {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this webhook validates %s, not %s", v.kind, req.Kind))
	}
	var obj struct {
		Spec S `json:"spec"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the %s: %w", v.kind.Kind, err))
	}
	return Refuse(v.kind, req, v.validate(&obj.Spec))
}

// Refuse answers req: allowed when errs is empty, else refused with an
// Invalid status naming each field, as the API server's own validation.
func Refuse(kind schema.GroupKind, req admission.Request, errs field.ErrorList) admission.Response {
	if len(errs) == 0 {
		return admission.Allowed("")
	}
	status := apierrors.NewInvalid(kind, req.Name, errs).Status()
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}
