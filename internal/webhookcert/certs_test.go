package webhookcert

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

var hosts = []string{"agentrun-webhook-service.agentrun-system.svc", "127.0.0.1"}

// verifies: b's serving certificate chains to a CA of its ca.crt for host.
func verifies(t *testing.T, b *bundle, host string) {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(b.caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	if _, err := b.cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: b.cert.NotBefore.Add(time.Hour)}); err != nil {
		t.Errorf("the serving certificate does not verify for %s: %v", host, err)
	}
}

func TestNewBundleIsFreshAndRoundTrips(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := renew(nil, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	verifies(t, b, hosts[0])
	verifies(t, b, "127.0.0.1")
	if b.cert.PublicKeyAlgorithm != x509.ECDSA || b.ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("keys %v / %v, want ECDSA", b.cert.PublicKeyAlgorithm, b.ca.PublicKeyAlgorithm)
	}
	if b.cert.IsCA || !b.ca.IsCA {
		t.Errorf("IsCA: serving %v, CA %v", b.cert.IsCA, b.ca.IsCA)
	}
	back, err := parse(b.data())
	if err != nil {
		t.Fatal(err)
	}
	if !back.fresh(hosts, now) || !back.fresh([]string{"127.0.0.1", hosts[0]}, now) {
		t.Error("a new bundle read back from its Secret data is not fresh for its hosts")
	}
	if back.fresh([]string{"other.agentrun-system.svc"}, now) {
		t.Error("fresh for a host it was not made for")
	}
}

// TestRenewKeepsTheCAWhileItIsFresh: a serving certificate due for renewal
// is renewed under the same CA (the caBundle stays); a CA due for renewal
// is replaced, the old one kept after it in ca.crt until it expires.
func TestRenewKeepsTheCAWhileItIsFresh(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := renew(nil, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	due := now.Add(ServingLifetime - servingRenew + time.Hour)
	if !b.fresh(hosts, now.Add(ServingLifetime-servingRenew-time.Hour)) || b.fresh(hosts, due) {
		t.Fatal("the serving certificate's renewal point is not two thirds into its life")
	}
	r, err := renew(b, hosts, due)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.caPEM, b.caPEM) || bytes.Equal(r.certPEM, b.certPEM) || !r.fresh(hosts, due) {
		t.Error("renewing the serving certificate changed the CA, or made no new certificate")
	}

	late := now.Add(CALifetime - caRenewBefore + time.Hour)
	r, err = renew(b, hosts, late)
	if err != nil {
		t.Fatal(err)
	}
	if r.ca.Equal(b.ca) || !r.fresh(hosts, late) {
		t.Fatal("a CA due for renewal was kept")
	}
	var cas []*x509.Certificate
	for rest := r.caPEM; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, c)
	}
	if len(cas) != 2 || !cas[0].Equal(r.ca) || !cas[1].Equal(b.ca) {
		t.Errorf("ca.crt after a CA renewal holds %d certificates, want the new CA then the old", len(cas))
	}
	back, err := parse(r.data())
	if err != nil || !back.ca.Equal(r.ca) {
		t.Errorf("the renewed bundle reads back with CA %v (%v)", back, err)
	}
}

func TestParseRefusesMismatchedData(t *testing.T) {
	now := time.Now()
	a, err := renew(nil, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := renew(nil, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string][]byte{
		"empty":                      {},
		"key of another certificate": {KeyCA: a.caPEM, KeyCAKey: a.caKeyPEM, KeyCert: a.certPEM, KeyKey: other.keyPEM},
		"signed by another CA":       {KeyCA: a.caPEM, KeyCAKey: a.caKeyPEM, KeyCert: other.certPEM, KeyKey: other.keyPEM},
		"no CA key":                  {KeyCA: a.caPEM, KeyCert: a.certPEM, KeyKey: a.keyPEM},
	} {
		if _, err := parse(data); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}
