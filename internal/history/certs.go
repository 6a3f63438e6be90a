package history

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/webhookcert"
)

// APIServiceName is the history API's APIService.
var APIServiceName = hv1.GroupVersion.Version + "." + hv1.GroupName

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// CertOptions say where the serving certificate comes from when no
// --cert-dir or --tls-cert-file is given: a self-signed CA and serving
// certificate kept in a Secret (internal/webhookcert, as the admission
// webhooks' are), the CA written into the APIService's caBundle so the
// API server trusts it. Without a Secret name, a certificate is made in
// memory at start, whose CA nobody knows: only for trying the server out
// with an APIService that skips verification.
type CertOptions struct {
	// Namespace and SecretName name the Secret (the server's namespace).
	Namespace, SecretName string
	// Service is the history Service's name: the certificate is for
	// <service>.<namespace>.svc, the name the API server checks.
	Service string
	// APIService whose caBundle is kept (APIServiceName by default).
	APIService string
	// Kubeconfig reaches the API server (in-cluster when empty).
	Kubeconfig string
}

// AddFlags registers the options as flags.
func (c *CertOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Namespace, "cert-secret-namespace", "", "Namespace of the serving certificate's Secret (the server's own).")
	fs.StringVar(&c.SecretName, "cert-secret", "", "Secret keeping a self-signed CA and serving certificate, made and renewed as needed, the CA written into the APIService's caBundle. Used when neither --cert-dir nor --tls-cert-file is given.")
	fs.StringVar(&c.Service, "service", "agentrun-history", "The history Service's name; the certificate is for <service>.<namespace>.svc.")
	fs.StringVar(&c.APIService, "apiservice", APIServiceName, "The APIService whose caBundle is kept equal to the Secret's CA.")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "Kubeconfig for the certificate's Secret and the APIService (in-cluster when empty).")
}

// serving prepares the serving certificate: files when given, else the
// Secret's, else one made in memory.
func (o *Options) serving(ctx context.Context) (*certKeeper, error) {
	sc := &o.SecureServing.ServerCert
	if sc.CertKey.CertFile == "" && sc.CertDirectory != "" {
		sc.CertKey.CertFile = filepath.Join(sc.CertDirectory, sc.PairName+".crt")
		sc.CertKey.KeyFile = filepath.Join(sc.CertDirectory, sc.PairName+".key")
	}
	if sc.CertKey.CertFile != "" {
		return nil, nil
	}
	if o.Certs.SecretName == "" {
		return nil, o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")})
	}
	k, err := newCertKeeper(o.Certs, o.Log)
	if err != nil {
		return nil, err
	}
	if err := k.keeper.Sync(ctx); err != nil {
		return nil, fmt.Errorf("preparing the serving certificate: %w", err)
	}
	sc.GeneratedCert = k
	return k, nil
}

// certKeeper serves webhookcert's certificate to the generic server and
// keeps the APIService's caBundle.
type certKeeper struct {
	keeper   *webhookcert.Keeper
	dyn      dynamic.Interface
	name     string
	log      logr.Logger
	mu       sync.Mutex
	notify   []dynamiccertificates.Listener
	lastCert []byte
}

var _ dynamiccertificates.CertKeyContentProvider = (*certKeeper)(nil)

func newCertKeeper(c CertOptions, log logr.Logger) (*certKeeper, error) {
	if c.Namespace == "" {
		return nil, fmt.Errorf("--cert-secret needs --cert-secret-namespace")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	ck := &certKeeper{dyn: dyn, name: c.APIService, log: log}
	if ck.name == "" {
		ck.name = APIServiceName
	}
	ck.keeper, err = webhookcert.New(webhookcert.Config{
		Namespace: c.Namespace, SecretName: c.SecretName, Kube: kube, Log: log,
		Hosts:     []string{webhookcert.ServiceHost(c.Service, c.Namespace)},
		Recheck:   time.Minute,
		AfterSync: ck.synced,
	})
	return ck, err
}

// keep renews the certificate and the caBundle until ctx ends.
func (c *certKeeper) keep(ctx context.Context) { _ = c.keeper.Start(ctx) }

// synced tells the TLS server of a new certificate and writes the CA
// into the APIService.
func (c *certKeeper) synced(ctx context.Context, ca []byte) error {
	cert, _ := c.keeper.CertKeyPEM()
	c.mu.Lock()
	changed := !bytes.Equal(cert, c.lastCert)
	c.lastCert = cert
	listeners := c.notify
	c.mu.Unlock()
	if changed {
		for _, l := range listeners {
			l.Enqueue()
		}
	}
	return c.ensureCABundle(ctx, ca)
}

func (c *certKeeper) ensureCABundle(ctx context.Context, ca []byte) error {
	svc, err := c.dyn.Resource(apiServices).Get(ctx, c.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.log.Info("Waiting for the APIService to write its caBundle", "apiservice", c.name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading APIService %s: %w", c.name, err)
	}
	want := base64.StdEncoding.EncodeToString(ca)
	if got, _, _ := unstructuredString(svc.Object, "spec", "caBundle"); got == want {
		return nil
	}
	patch := fmt.Appendf(nil, `{"spec":{"caBundle":%q,"insecureSkipTLSVerify":false}}`, want)
	if _, err := c.dyn.Resource(apiServices).Patch(ctx, c.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("writing APIService %s's caBundle: %w", c.name, err)
	}
	c.log.Info("Wrote the APIService's caBundle", "apiservice", c.name)
	return nil
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// Name names the certificate in the generic server's logs.
func (*certKeeper) Name() string { return "agentrun-history-serving" }

// CurrentCertKeyContent is the serving pair.
func (c *certKeeper) CurrentCertKeyContent() ([]byte, []byte) { return c.keeper.CertKeyPEM() }

// AddListener is told of each new certificate.
func (c *certKeeper) AddListener(l dynamiccertificates.Listener) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notify = append(c.notify, l)
}
