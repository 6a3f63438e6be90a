package manager_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

const (
	webhookNS      = "webhook-system"
	webhookSecret  = "agentrun-webhook-server-cert"
	webhookService = "agentrun-webhook-service"
	webhookConfig  = "agentrun-validating-webhook-configuration"
)

// TestWebhooksServedWithTheManagersOwnCertificate runs two managers (the
// real wiring of internal/manager, as two replicas) against one API server
// that has config/webhook's ValidatingWebhookConfiguration installed with
// no caBundle, calling the first replica by URL (envtest has no Service
// network). The replicas end up with one Secret, both serve its
// certificate, and the caBundle is its CA, so the API server calls the
// webhook: through the real kubectl a policy whose CEL rule does not
// compile is refused with the CEL error and a good one admitted. A
// restarted replica reuses the Secret (nothing is written), and a caBundle
// that an apply resets is written back.
func TestWebhooksServedWithTheManagersOwnCertificate(t *testing.T) {
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	addrA, addrB := freeAddr(t), freeAddr(t)
	installWebhookConfig(t, kube, addrA)
	stopA := startWebhookManager(t, addrA)
	startWebhookManager(t, addrB)

	secret, bundle := waitForCABundle(t, kube)
	if list, err := kube.CoreV1().Secrets(webhookNS).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Fatalf("the two replicas made %v Secrets (%v), want one", secretNames(list), err)
	}
	if !bytes.Equal(bundle, secret.Data["ca.crt"]) {
		t.Errorf("the caBundle is not the Secret's ca.crt")
	}
	for _, addr := range []string{addrA, addrB} {
		checkServedCertificate(t, addr, secret)
	}

	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.Kubectl(kubeconfig, "create", "namespace", "webhook-team"); err != nil {
		t.Fatal(err)
	}
	good := policy(`tool.name == "create_ticket"`)
	if out, err := applyYAML(t, kubeconfig, good); err != nil || !strings.Contains(out, "created") {
		t.Fatalf("a good policy: %v %s", err, out)
	}
	out, err := applyYAML(t, kubeconfig, policy(`tool.nmae == "create_ticket"`))
	if err == nil || !strings.Contains(out, "spec.rules[0].match") || !strings.Contains(out, "undefined field 'nmae'") {
		t.Errorf("a rule that does not compile: %v %s; want it refused with the CEL error", err, out)
	}

	// A schedule CEL lets through (five fields of the right characters)
	// that the cron parser refuses is refused at apply by the webhook.
	out, err = applyYAML(t, kubeconfig, `apiVersion: agentrun.dev/v1alpha1
kind: AgentRunSchedule
metadata:
  name: nightly
  namespace: webhook-team
spec:
  schedule: "61 * * * *"
  template:
    spec:
      agent: triage
`)
	if err == nil || !strings.Contains(out, "spec.schedule") || !strings.Contains(out, "above maximum") {
		t.Errorf("a schedule the cron parser refuses: %v %s; want it refused naming spec.schedule", err, out)
	}

	// A restarted replica uses the Secret and caBundle as they are.
	stopA()
	vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	startWebhookManager(t, addrA)
	checkServedCertificate(t, addrA, secret)
	after, err := kube.CoreV1().Secrets(webhookNS).Get(ctx, webhookSecret, metav1.GetOptions{})
	if err != nil || after.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the restart wrote the Secret (%v): resourceVersion %s, was %s", err, after.ResourceVersion, secret.ResourceVersion)
	}
	if again, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookConfig, metav1.GetOptions{}); err != nil || again.ResourceVersion != vwc.ResourceVersion {
		t.Errorf("the restart wrote the webhook configuration (%v)", err)
	}

	// An apply of the configuration as shipped (no caBundle) is undone.
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, b := waitForCABundle(t, kube); !bytes.Equal(b, secret.Data["ca.crt"]) {
		t.Errorf("the caBundle written back is not the Secret's CA")
	}
}

// installWebhookConfig creates config/webhook's configuration, calling
// addr by URL, with no caBundle, and deletes it when the test ends.
func installWebhookConfig(t *testing.T, kube kubernetes.Interface, addr string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.Unmarshal(data, vwc); err != nil || len(vwc.Webhooks) == 0 {
		t.Fatalf("config/webhook/manifests.yaml: %v", err)
	}
	vwc.Name = webhookConfig
	for i := range vwc.Webhooks {
		url := "https://" + addr + *vwc.Webhooks[i].ClientConfig.Service.Path
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
	}
	configs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := configs.Create(context.Background(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = configs.Delete(context.Background(), webhookConfig, metav1.DeleteOptions{}) })
}

// startWebhookManager runs a manager serving the webhooks on addr, its
// certificate also for 127.0.0.1 (the URL the API server calls), and
// returns a func that stops it and waits for it to end.
func startWebhookManager(t *testing.T, addr string) func() {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{MetricsAddr: "0", SkipNameValidation: true,
		Webhook: manager.WebhookOptions{Addr: addr, Namespace: webhookNS, SecretName: webhookSecret, ServiceName: webhookService,
			Configuration: webhookConfig, ExtraHosts: []string{"127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager on %s ended with %v", addr, err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return stop
}

// waitForCABundle waits until every webhook of the configuration has a
// caBundle, and returns the Secret and the bundle.
func waitForCABundle(t *testing.T, kube kubernetes.Interface) (*corev1.Secret, []byte) {
	t.Helper()
	var bundle []byte
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, webhookConfig, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range vwc.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
		}
		bundle = vwc.Webhooks[0].ClientConfig.CABundle
		return true, nil
	})
	if err != nil {
		t.Fatalf("no caBundle written within a minute: %v", err)
	}
	s, err := kube.CoreV1().Secrets(webhookNS).Get(context.Background(), webhookSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s, bundle
}

// checkServedCertificate: the replica on addr serves the Secret's
// certificate (waiting for it to listen), which its CA verifies for the
// webhook Service's name.
func checkServedCertificate(t *testing.T, addr string, s *corev1.Secret) {
	t.Helper()
	var served *x509.Certificate
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the chain is verified below
		if err != nil {
			return false, nil
		}
		defer func() { _ = conn.Close() }()
		served = conn.ConnectionState().PeerCertificates[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("nothing serves TLS on %s: %v", addr, err)
	}
	want, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served.Raw, want.Certificate[0]) {
		t.Errorf("%s serves a certificate other than Secret %s's", addr, s.Name)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	if _, err := served.Verify(x509.VerifyOptions{Roots: roots, DNSName: webhookService + "." + webhookNS + ".svc"}); err != nil {
		t.Errorf("the certificate served on %s does not verify for the Service: %v", addr, err)
	}
}

func policy(match string) string {
	return `apiVersion: agentrun.dev/v1alpha1
kind: AgentToolPolicy
metadata: {name: checked, namespace: webhook-team}
spec:
  rules:
  - name: checked
    match: '` + match + `'
    action: Deny
`
}

func applyYAML(t *testing.T, kubeconfig, doc string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "obj.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return testenv.Kubectl(kubeconfig, "apply", "-f", path)
}

func secretNames(l *corev1.SecretList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, s := range l.Items {
		out = append(out, s.Name)
	}
	return out
}
