package manager_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// TestSecureMetricsAnswerOnlyAuthorizedScrapers runs the manager with
// secure metrics as a ServiceAccount holding exactly the generated manager
// ClusterRole (config/rbac/role.yaml, from the RBAC markers), so the
// TokenReview and SubjectAccessReview it sends are ones its own role lets
// it send. Over HTTPS, a scrape without a token is refused with 401, one
// with a token of a ServiceAccount bound to nothing with 403, and one with
// a token of a ServiceAccount bound to config/rbac's metrics-reader
// ClusterRole is served the operator's metrics; plain HTTP gets no metrics.
func TestSecureMetricsAnswerOnlyAuthorizedScrapers(t *testing.T) {
	ctx := context.Background()
	k8s, err := client.New(env.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "metrics-auth"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	managerRole := clusterRoleFrom(t, k8s, "role.yaml", "metrics-test-manager")
	readerRole := clusterRoleFrom(t, k8s, "metrics_reader_role.yaml", "metrics-test-reader")
	cfg := &rest.Config{Host: env.Config.Host, BearerToken: serviceAccountToken(t, k8s, ns, "manager", managerRole),
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
	scraper := serviceAccountToken(t, k8s, ns, "scraper", readerRole)
	stranger := serviceAccountToken(t, k8s, ns, "stranger", "")

	addr := freeAddr(t)
	mgr, err := manager.New(cfg, manager.Options{MetricsAddr: addr, MetricsSecure: true, ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// The certificate is self-signed (no --metrics-cert-dir): the scraper
	// does not verify it, as a ServiceMonitor with insecureSkipVerify.
	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := https.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Wait for the endpoint: the first answer of any kind.
	deadline := time.Now().Add(30 * time.Second)
	for code, body := scrape(""); code == 0; code, body = scrape("") {
		if time.Now().After(deadline) {
			t.Fatalf("the metrics endpoint does not answer on %s: %s", addr, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, c := range []struct {
		who   string
		token string
		want  int
	}{{"no token", "", http.StatusUnauthorized}, {"a token bound to nothing", stranger, http.StatusForbidden},
		{"a metrics-reader token", scraper, http.StatusOK}} {
		code, body := scrape(c.token)
		if code != c.want {
			t.Errorf("scrape with %s: %d, want %d: %.200s", c.who, code, c.want, body)
		}
		if served := strings.Contains(body, "agentrun_executor_slots{"); served != (c.want == http.StatusOK) {
			t.Errorf("scrape with %s (%d) is served the operator's metrics: %v", c.who, code, served)
		}
	}
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(body), "agentrun_") {
			t.Errorf("plain HTTP is served the metrics (%d)", resp.StatusCode)
		}
	}
}

// clusterRoleFrom creates the ClusterRole of a file of config/rbac under
// another name and returns it.
func clusterRoleFrom(t *testing.T, k8s client.Client, file, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil || len(role.Rules) == 0 {
		t.Fatalf("config/rbac/%s: %v (%d rules)", file, err, len(role.Rules))
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: name}
	if err := k8s.Create(context.Background(), &role); err != nil {
		t.Fatal(err)
	}
	return name
}

// serviceAccountToken creates a ServiceAccount, binds it cluster-wide to
// role (none when empty), and returns a token the TokenRequest API issued
// for it.
func serviceAccountToken(t *testing.T, k8s client.Client, ns, name, role string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if role != "" {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
		if err := k8s.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if err := k8s.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
