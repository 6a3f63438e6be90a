package manager

import (
	"errors"
	"fmt"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/admissionserver"
	"github.com/agentrun-dev/agentrun-operator/internal/policyadmission"
	"github.com/agentrun-dev/agentrun-operator/internal/schedule"
	"github.com/agentrun-dev/agentrun-operator/internal/webhookcert"
)

// validators are the admission webhooks the manager serves, by the path
// their +kubebuilder:webhook marker gives config/webhook. A new one is one
// line, e.g. for a func(*arv1.XSpec) field.ErrorList:
//
//	"/validate-agentrun-dev-v1alpha1-x": admissionserver.ForSpec(arv1.GroupVersion.WithKind("X").GroupKind(), x.Validate),
func validators() admissionserver.Registry {
	return admissionserver.Registry{
		policyadmission.Path: policyadmission.Validator{},
		schedule.Path:        admissionserver.ForSpec(arv1.GroupVersion.WithKind("AgentRunSchedule").GroupKind(), schedule.Validate),
	}
}

// The certificate Secret is the manager's own, in its namespace; the
// webhook configuration is written by name only. Both grants are
// restricted by resourceNames in config/rbac/webhook_role.yaml (a marker
// cannot name them: kustomize's prefix and the chart's release name change
// them).

// WebhookOptions say whether and how the admission webhooks are served.
type WebhookOptions struct {
	// Addr is where they listen (":9443"); "" or "0" turns them off.
	Addr string
	// CertDir holds tls.crt and tls.key made by someone else (cert-manager
	// and its CA injector); empty: the manager keeps its own certificate
	// in Secret SecretName and the caBundle of Configuration.
	CertDir string
	// Namespace of the Secret and the Service (default: the pod's).
	Namespace string
	// SecretName holds the CA and the serving certificate.
	SecretName string
	// ServiceName is the webhook Service the API server calls: the
	// certificate is for <ServiceName>.<Namespace>.svc.
	ServiceName string
	// Configuration is the ValidatingWebhookConfiguration whose caBundle
	// the manager writes; empty: none.
	Configuration string
	// ExtraHosts are further names or addresses in the certificate (a
	// webhook configuration that calls a URL, as tests and a manager run
	// outside the cluster do).
	ExtraHosts []string
}

func (w WebhookOptions) on() bool { return w.Addr != "" && w.Addr != "0" }

// addWebhooks serves the validators on o.Addr, with the manager's own
// certificate unless a CertDir is given; a readiness check holds the pod
// out of the Service until it serves a certificate.
func addWebhooks(mgr ctrl.Manager, cfg *rest.Config, o WebhookOptions) error {
	if !o.on() {
		return nil
	}
	so := admissionserver.Options{Addr: o.Addr, CertDir: o.CertDir}
	var keeper *webhookcert.Keeper
	if o.CertDir == "" {
		if o.Namespace == "" {
			if o.Namespace = podNamespace(); o.Namespace == "" {
				return errors.New("outside a cluster the webhook certificate needs a namespace: pass --webhook-namespace, or --webhook-bind-address=0")
			}
		}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		hosts := append([]string{webhookcert.ServiceHost(o.ServiceName, o.Namespace)}, o.ExtraHosts...)
		keeper, err = webhookcert.New(webhookcert.Config{
			Namespace: o.Namespace, SecretName: o.SecretName, Hosts: hosts, WebhookConfiguration: o.Configuration,
			Kube: kube, Log: ctrl.Log.WithName("webhook-cert"),
		})
		if err != nil {
			return err
		}
		if err := mgr.Add(keeper); err != nil {
			return err
		}
		so.GetCertificate = keeper.GetCertificate
	}
	srv, err := admissionserver.Server(so, validators())
	if err != nil {
		return err
	}
	if err := mgr.Add(srv); err != nil {
		return fmt.Errorf("adding the webhook server: %w", err)
	}
	started := srv.StartedChecker()
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		if keeper != nil {
			if err := keeper.Ready(); err != nil {
				return err
			}
		}
		return started(req)
	})
}
