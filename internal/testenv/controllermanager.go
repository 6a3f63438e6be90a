package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControllerManagerControllers are the kube-controller-manager controllers
// the test control plane runs: the garbage collector (owner references) and
// the namespace controller (namespace deletion), what a cluster does to the
// operator's objects that nothing else here would. The others (Deployments,
// Jobs, nodes, service accounts...) have nothing to act on.
var ControllerManagerControllers = []string{"garbagecollector", "namespace"}

// ControllerManagerPath is the kube-controller-manager built alongside the
// API server.
func ControllerManagerPath() string { return filepath.Join(BinDir(), "kube-controller-manager") }

// controllerManager is a running kube-controller-manager.
type controllerManager struct {
	cmd    *exec.Cmd
	log    *tail
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// startControllerManager starts kube-controller-manager against the API
// server of cfg, authenticated by token, with its kubeconfig in dir, and
// waits until its health endpoint answers.
func startControllerManager(cfg *rest.Config, token, dir string) (*controllerManager, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig-controller-manager")
	if err := writeTokenKubeconfig(kubeconfig, cfg, "kube-controller-manager", token); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &controllerManager{log: &tail{max: 64 << 10}, exited: make(chan struct{})}
	c.cmd = exec.Command(ControllerManagerPath(),
		"--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(ControllerManagerControllers, ","),
		"--leader-elect=false",
		// Every controller acts as the kubeconfig's user: there are no
		// per-controller ServiceAccounts (the token controller is off).
		"--use-service-account-credentials=false",
		// Served only for the health check below.
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
	)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", ControllerManagerPath(), err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	if err := c.waitHealthy(port, time.Minute); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitHealthy polls /healthz (always allowed without credentials) until it
// answers 200.
func (c *controllerManager) waitHealthy(port int, timeout time.Duration) error {
	// Its serving certificate is self-signed in memory; this is loopback to
	// a child process.
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
	}}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("kube-controller-manager exited (%v):\n%s", c.err, c.log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-controller-manager not healthy at %s after %s:\n%s", url, timeout, c.log)
		}
	}
}

// stop ends it: SIGTERM, then SIGKILL if it has not exited within 5 s.
func (c *controllerManager) stop() {
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// writeTokenKubeconfig writes a kubeconfig for the API server of cfg that
// authenticates as user with a bearer token.
func writeTokenKubeconfig(path string, cfg *rest.Config, user, token string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: user}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// freePort is a loopback TCP port free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}

// tail keeps the last max bytes written to it: a child's log, for the
// error that says why it failed.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
