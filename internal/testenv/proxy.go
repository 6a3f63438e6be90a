package testenv

import (
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Proxy forwards TCP connections to the API server, and can cut them off:
// a replica whose client goes through it can be partitioned from the
// control plane while everything else still reaches it.
type Proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// StartProxy listens on loopback and forwards to the API server.
func (e *Env) StartProxy() (*Proxy, error) {
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: u.Host, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue // held open, never answered: a partition, not a refusal
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// Cut drops every open connection; new ones are accepted and then never
// answered, as when a network partition swallows packets.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() {
	p.Cut()
	_ = p.l.Close()
}

// Config is the API server's rest.Config reached through the proxy.
func (p *Proxy) Config(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = "https://" + p.l.Addr().String()
	return cfg
}

// Kubeconfig writes a copy of the kubeconfig at path whose server is the
// proxy, into dir, and returns its path.
func (p *Proxy) Kubeconfig(path, dir string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.l.Addr().String()
	}
	out := filepath.Join(dir, "kubeconfig-via-proxy-"+strings.ReplaceAll(p.l.Addr().String(), ":", "-"))
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		return "", err
	}
	return out, os.Chmod(out, 0o600)
}
