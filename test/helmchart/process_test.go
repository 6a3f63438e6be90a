package helmchart_test

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
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
	readyPath       string
	exited          chan error
}

// buildDir holds the built manager; TestMain removes it.
var buildDir string

// buildManager builds cmd/manager once per test binary, static and with
// -trimpath, as the image's is (the Makefile's GO_BUILD).
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
	m := launchManager(t, d, kubeconfig, nil)
	m.waitReady(t)
	return m
}

// launchManager starts the manager as startManager does, without waiting
// for it to be ready. kl fills in what the container takes from Secrets
// (nil: the Deployment may reference none).
func launchManager(t *testing.T, d *appsv1.Deployment, kubeconfig string, kl *kubelet) *managerProcess {
	t.Helper()
	bin, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	m := &managerProcess{log: &syncBuffer{}, metrics: freeAddr(t), probes: freeAddr(t), webhook: freeAddr(t), exited: make(chan error, 1),
		readyPath: c.ReadinessProbe.HTTPGet.Path}
	if kl != nil {
		kl.mount(t, d)
	}
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
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && kl != nil:
			env = append(env, e.Name+"="+kl.secretKey(t, d.Namespace, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key))
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+kl.path(e.Value))
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
	return m
}

// waitReady waits a minute at most for the manager's readiness probe to
// answer 200.
func (m *managerProcess) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-m.exited:
			t.Fatalf("the manager exited (%v) with args %v:\n%s", err, m.cmd.Args[1:], m.log.String())
		default:
		}
		if code, _ := get("http://" + m.probes + m.readyPath); code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager is not ready on %s after a minute:\n%s", m.readyPath, m.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubelet does for the manager process what a kubelet does for its
// container: it reads the Secrets the container's environment and volumes
// name (as the admin: the manager's ServiceAccount need not read them), and
// writes each Secret volume's items under root, which stands for the
// container's filesystem root, so a path under a mount becomes root+path.
type kubelet struct {
	admin, root string
	mounts      []string
}

func newKubelet(t *testing.T, admin string) *kubelet {
	t.Helper()
	return &kubelet{admin: admin, root: t.TempDir()}
}

// secretKey is the value of key in Secret ns/name, as the kubelet reads it
// for an env var's secretKeyRef.
func (k *kubelet) secretKey(t *testing.T, ns, name, key string) string {
	t.Helper()
	out, err := testenv.Kubectl(k.admin, "get", "secret", name, "-n", ns, "-o", "go-template={{index .data \""+key+"\"}}")
	if err != nil {
		t.Fatalf("the container's Secret %s/%s: %v %s", ns, name, err, out)
	}
	v, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil || len(v) == 0 {
		t.Fatalf("Secret %s/%s has no key %q (%v)", ns, name, key, err)
	}
	return string(v)
}

// mount writes the items of the container's Secret volumes under root, at
// their mount paths, read-only.
func (k *kubelet) mount(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	for _, vm := range pod.Containers[0].VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			if !vm.ReadOnly {
				t.Errorf("Secret volume %s is mounted writable at %s", v.Name, vm.MountPath)
			}
			dir := filepath.Join(k.root, vm.MountPath)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, it := range v.Secret.Items {
				_ = os.Remove(filepath.Join(dir, it.Path)) // a Secret changed since the last start
				if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(k.secretKey(t, d.Namespace, v.Secret.SecretName, it.Key)), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			k.mounts = append(k.mounts, vm.MountPath)
		}
	}
}

// path is p as the process sees it: under root when it lies in a mount.
func (k *kubelet) path(p string) string {
	if k == nil {
		return p
	}
	for _, m := range k.mounts {
		if p == m || strings.HasPrefix(p, m+"/") {
			return filepath.Join(k.root, p)
		}
	}
	return p
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
