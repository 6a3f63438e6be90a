package helmchart_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// podName is the replica's name, as the Downward API would give it.
const podName = "agentrun-operator-7d9f8c6b5-x2k4q"

// managerProcess is the manager binary running as the chart's Deployment
// would run it.
type managerProcess struct {
	cmd             *exec.Cmd
	log             *syncBuffer
	metrics, probes string
	webhook         string
	exited          chan error
}

// buildDir holds the built manager; TestMain removes it.
var buildDir string

// buildManager builds cmd/manager once per test binary, with the
// Dockerfile's flags.
var buildManager = sync.OnceValues(func() (string, error) { return buildCmd("manager") })

// buildPlugin builds cmd/kubectl-agentrun (the console's binary) once.
var buildPlugin = sync.OnceValues(func() (string, error) { return buildCmd("kubectl-agentrun") })

// buildDirOnce makes the directory both builds write into.
var buildDirOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "agentrun-helmchart-")
	buildDir = dir
	return dir, err
})

func buildCmd(name string) (string, error) {
	dir, err := buildDirOnce()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/"+name)
	build.Dir, build.Env = testenv.RepoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/%s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// startManager runs the manager binary with the Deployment container's
// arguments and environment, the Downward API's values filled in, against
// kubeconfig. Only the bind addresses change: the chart's ports, on
// loopback ports that are free on this machine. It waits for /readyz
// (which includes the webhook server serving its certificate).
func startManager(t *testing.T, d *appsv1.Deployment, kubeconfig string) *managerProcess {
	t.Helper()
	bin, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	m := &managerProcess{log: &syncBuffer{}, metrics: freeAddr(t), probes: freeAddr(t), webhook: freeAddr(t), exited: make(chan error, 1)}
	var args []string
	for _, a := range c.Args {
		switch {
		case a == fmt.Sprintf("--metrics-bind-address=:%d", portOf(c, "metrics")):
			a = "--metrics-bind-address=" + m.metrics
		case a == fmt.Sprintf("--health-probe-bind-address=:%d", portOf(c, c.ReadinessProbe.HTTPGet.Port.String())):
			a = "--health-probe-bind-address=" + m.probes
		case a == fmt.Sprintf("--webhook-bind-address=:%d", portOf(c, "webhook")):
			a = "--webhook-bind-address=" + m.webhook
		case strings.HasPrefix(a, "--metrics-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") ||
			strings.HasPrefix(a, "--webhook-bind-address") && a != "--webhook-bind-address=0":
			t.Fatalf("%s does not bind the container port the Service and probes use (%v)", a, c.Ports)
		}
		args = append(args, a)
	}
	env := append(os.Environ(), "KUBECONFIG="+kubeconfig)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+podName)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+d.Namespace)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("env %s comes from %+v, which the test cannot fill in", e.Name, e.ValueFrom)
		}
	}
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env, m.cmd.Stdout, m.cmd.Stderr = env, m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(func() { _ = m.cmd.Process.Kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-m.exited:
			t.Fatalf("the manager exited (%v) with args %v:\n%s", err, args, m.log.String())
		default:
		}
		if code, _ := get("http://" + m.probes + c.ReadinessProbe.HTTPGet.Path); code == http.StatusOK {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager is not ready on %s after a minute:\n%s", c.ReadinessProbe.HTTPGet.Path, m.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkMetrics: the metrics endpoint the Service targets serves HTTPS, and
// the operator's metrics only to a scraper whose token the API server
// authenticates and authorizes: a ServiceAccount bound, with the real
// kubectl, to the chart's metrics-reader ClusterRole (reader) is served
// them, a request without a token is refused with 401, and a ServiceAccount
// bound to nothing with 403.
func (m *managerProcess) checkMetrics(t *testing.T, admin, ns, reader string) {
	t.Helper()
	token := func(sa string) string {
		if _, err := testenv.Kubectl(admin, "create", "serviceaccount", sa, "-n", ns); err != nil {
			t.Fatal(err)
		}
		if sa == "prometheus" {
			if _, err := testenv.Kubectl(admin, "create", "clusterrolebinding", ns+"-prometheus", "--clusterrole="+reader, "--serviceaccount="+ns+":"+sa); err != nil {
				t.Fatal(err)
			}
		}
		out, err := testenv.Kubectl(admin, "create", "token", sa, "-n", ns, "--duration=1h")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"a ServiceAccount bound to nothing", token("nobody"), http.StatusForbidden},
		{"a ServiceAccount bound to " + reader, token("prometheus"), http.StatusOK}} {
		code, body := scrape("https://"+m.metrics+"/metrics", c.token)
		served := strings.Contains(body, "agentrun_runs{")
		if code != c.want || served != (c.want == http.StatusOK) {
			t.Errorf("GET https://%s/metrics as %s: %d (agentrun_runs served: %v), want %d", m.metrics, c.who, code, served, c.want)
		}
	}
}

// scrape GETs url over HTTPS with a bearer token (none when empty). The
// manager's certificate is self-signed, as the chart's default
// serviceMonitor.tlsConfig accepts.
func scrape(url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// stop sends SIGTERM, as the kubelet does, and waits for a clean exit
// within the pod's grace period.
func (m *managerProcess) stop(t *testing.T) {
	t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.exited:
		if err != nil {
			t.Errorf("the manager exited with %v on SIGTERM:\n%s", err, m.log.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the manager did not stop within 30s of SIGTERM")
	}
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
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

// syncBuffer is the manager's output, written by the process and read by
// the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
