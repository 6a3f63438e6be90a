// Package webhookcert gives the manager's admission webhooks a serving
// certificate without cert-manager: a self-signed CA and an ECDSA serving
// certificate for the webhook Service, kept in one Secret in the manager's
// namespace (so every replica serves the same one and a restart keeps it),
// and the CA written into the caBundle of the manager's own
// ValidatingWebhookConfiguration, so the API server trusts it.
//
// Replicas agree through the API server: the first to create the Secret
// wins (the others read it on AlreadyExists), and a renewal is an update
// at the resourceVersion read (a Conflict means another replica renewed
// first, whose certificate is then used). The webhook configuration is
// watched by name, so a caBundle that an apply resets is written back at
// once.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Config says where the certificate lives and what it is for.
type Config struct {
	// Namespace and SecretName name the Secret (the manager's namespace).
	Namespace, SecretName string
	// Hosts are the names the serving certificate is for; the first is
	// the webhook Service's <service>.<namespace>.svc, the name the API
	// server checks.
	Hosts []string
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose
	// caBundle is kept equal to the CA; empty: none is written.
	WebhookConfiguration string
	Kube                 kubernetes.Interface
	Log                  logr.Logger
	// Clock defaults to the real clock; Recheck (default an hour) is how
	// often the certificate's expiry is looked at.
	Clock   clock.Clock
	Recheck time.Duration
	// AfterSync, when set, runs after every sync with the CA, for a
	// caBundle other than a webhook configuration's (the history API's
	// APIService).
	AfterSync func(ctx context.Context, caPEM []byte) error
}

// Keeper keeps the certificate and the caBundle, and hands the certificate
// to the TLS server. It runs on every replica (not only the leader).
type Keeper struct {
	c    Config
	cert atomic.Pointer[tls.Certificate]
	pem  atomic.Pointer[[2][]byte]
}

// New checks c and returns its Keeper.
func New(c Config) (*Keeper, error) {
	if c.Namespace == "" || c.SecretName == "" || len(c.Hosts) == 0 || c.Kube == nil {
		return nil, errors.New("the webhook certificate needs a namespace, a Secret name, the Service's host name and a client")
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Recheck <= 0 {
		c.Recheck = time.Hour
	}
	return &Keeper{c: c}, nil
}

// ServiceHost is the name the API server checks when it calls a webhook
// through a Service.
func ServiceHost(service, namespace string) string { return service + "." + namespace + ".svc" }

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (k *Keeper) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := k.cert.Load(); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("the webhook certificate is not loaded yet from Secret %s/%s", k.c.Namespace, k.c.SecretName)
}

// NeedLeaderElection is false: every replica serves the webhooks.
func (*Keeper) NeedLeaderElection() bool { return false }

// Start keeps the Secret and the caBundle until ctx ends: at start, when
// the webhook configuration changes, every Recheck, and after a failure
// with backoff.
func (k *Keeper) Start(ctx context.Context) error {
	changed := make(chan struct{}, 1)
	if k.c.WebhookConfiguration != "" {
		k.watchConfiguration(ctx, changed)
	}
	backoff := time.Second
	for {
		wait := k.c.Recheck
		if err := k.sync(ctx); err != nil {
			k.c.Log.Error(err, "Keeping the webhook certificate", "retryIn", backoff)
			wait, backoff = backoff, min(2*backoff, time.Minute)
		} else {
			backoff = time.Second
		}
		t := k.c.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
			t.Stop()
		case <-t.C():
		}
	}
}

// watchConfiguration signals changed whenever the webhook configuration
// (by name only, as the manager's RBAC allows) is created or changed.
func (k *Keeper) watchConfiguration(ctx context.Context, changed chan<- struct{}) {
	lw := toolscache.NewListWatchFromClient(k.c.Kube.AdmissionregistrationV1().RESTClient(), "validatingwebhookconfigurations",
		metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", k.c.WebhookConfiguration))
	inf := toolscache.NewSharedIndexInformer(lw, &admissionregistrationv1.ValidatingWebhookConfiguration{}, 0, toolscache.Indexers{})
	notify := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }})
	go inf.Run(ctx.Done())
}

// sync makes the Secret hold a fresh certificate, serves it, and writes
// its CA into the caBundle.
func (k *Keeper) sync(ctx context.Context) error {
	b, err := k.ensureSecret(ctx)
	if err != nil {
		return err
	}
	cert, err := b.tlsCertificate()
	if err != nil {
		return err
	}
	k.cert.Store(cert)
	k.pem.Store(&[2][]byte{b.certPEM, b.keyPEM})
	if k.c.AfterSync != nil {
		if err := k.c.AfterSync(ctx, b.caPEM); err != nil {
			return err
		}
	}
	if k.c.WebhookConfiguration == "" {
		return nil
	}
	return k.ensureCABundle(ctx, b.caPEM)
}

// Sync makes the certificate ready once (Start keeps it so), for a server
// that must have it before it listens.
func (k *Keeper) Sync(ctx context.Context) error { return k.sync(ctx) }

// CertKeyPEM is the serving certificate and key, PEM-encoded (nil before
// the first sync).
func (k *Keeper) CertKeyPEM() (cert, key []byte) {
	if p := k.pem.Load(); p != nil {
		return p[0], p[1]
	}
	return nil, nil
}

// ensureSecret returns the Secret's certificate, creating or renewing it
// when needed. A replica that loses a race uses the winner's.
func (k *Keeper) ensureSecret(ctx context.Context) (*bundle, error) {
	secrets := k.c.Kube.CoreV1().Secrets(k.c.Namespace)
	for range 5 {
		now := k.c.Clock.Now()
		s, err := secrets.Get(ctx, k.c.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			b, err := renew(nil, k.c.Hosts, now)
			if err != nil {
				return nil, err
			}
			_, err = secrets.Create(ctx, k.secret(b), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica was first: use its certificate
			}
			if err != nil {
				return nil, fmt.Errorf("creating Secret %s/%s: %w", k.c.Namespace, k.c.SecretName, err)
			}
			k.c.Log.Info("Created the webhook certificate Secret", "secret", k.key(), "hosts", k.c.Hosts, "expires", b.cert.NotAfter)
			return b, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", k.c.Namespace, k.c.SecretName, err)
		}
		old, perr := parse(s.Data)
		if perr == nil && old.fresh(k.c.Hosts, now) {
			return old, nil
		}
		reason := "due for renewal or for other hosts"
		if perr != nil {
			reason, old = perr.Error(), nil
		}
		b, err := renew(old, k.c.Hosts, now)
		if err != nil {
			return nil, err
		}
		s.Data, s.Type = b.data(), corev1.SecretTypeTLS
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica renewed it: read theirs
		}
		if err != nil {
			return nil, fmt.Errorf("renewing Secret %s/%s: %w", k.c.Namespace, k.c.SecretName, err)
		}
		k.c.Log.Info("Renewed the webhook certificate", "secret", k.key(), "reason", reason, "expires", b.cert.NotAfter)
		return b, nil
	}
	return nil, fmt.Errorf("secret %s/%s kept changing while it was read", k.c.Namespace, k.c.SecretName)
}

func (k *Keeper) secret(b *bundle) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: k.c.SecretName, Namespace: k.c.Namespace, Labels: map[string]string{
			"app.kubernetes.io/managed-by": "agentrun-operator", "app.kubernetes.io/component": "webhook-certificate",
		}},
		Type: corev1.SecretTypeTLS,
		Data: b.data(),
	}
}

func (k *Keeper) key() string { return k.c.Namespace + "/" + k.c.SecretName }

// ensureCABundle writes ca into every webhook of the configuration whose
// caBundle differs. A missing configuration is waited for (the watch
// brings it).
func (k *Keeper) ensureCABundle(ctx context.Context, ca []byte) error {
	configs := k.c.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	vwc, err := configs.Get(ctx, k.c.WebhookConfiguration, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		k.c.Log.Info("Waiting for the ValidatingWebhookConfiguration to write its caBundle", "name", k.c.WebhookConfiguration)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", k.c.WebhookConfiguration, err)
	}
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, ca) {
			vwc.Webhooks[i].ClientConfig.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if _, err := configs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the caBundle of ValidatingWebhookConfiguration %s: %w", k.c.WebhookConfiguration, err)
	}
	k.c.Log.Info("Wrote the webhook CA into the caBundle", "name", k.c.WebhookConfiguration, "webhooks", len(vwc.Webhooks))
	return nil
}

// Ready reports whether a certificate is being served (a readiness check).
func (k *Keeper) Ready() error {
	_, err := k.GetCertificate(nil)
	return err
}
