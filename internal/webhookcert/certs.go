package webhookcert

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Keys of the Secret: tls.crt and tls.key as kubernetes.io/tls wants them,
// ca.crt as cert-manager writes it, and the CA's key, so that any replica
// can renew the serving certificate under the same CA (the caBundle then
// stays as it is).
const (
	KeyCert   = "tls.crt"
	KeyKey    = "tls.key"
	KeyCA     = "ca.crt"
	KeyCAKey  = "ca.key"
	certBlock = "CERTIFICATE"
	keyBlock  = "EC PRIVATE KEY"
)

// Lifetimes. The serving certificate is renewed when a third of its life
// is left, the CA (which only the webhook configuration's caBundle trusts)
// a year before it expires, keeping the old CA in the bundle while
// replicas may still serve a certificate it signed.
const (
	CALifetime      = 10 * 365 * 24 * time.Hour
	ServingLifetime = 365 * 24 * time.Hour
	caRenewBefore   = 365 * 24 * time.Hour
	servingRenew    = ServingLifetime / 3
)

// bundle is the CA and serving pair of one Secret, parsed.
type bundle struct {
	caPEM, caKeyPEM, certPEM, keyPEM []byte
	ca, cert                         *x509.Certificate
	caKey                            *ecdsa.PrivateKey
}

// data is the bundle as the Secret stores it.
func (b *bundle) data() map[string][]byte {
	return map[string][]byte{KeyCA: b.caPEM, KeyCAKey: b.caKeyPEM, KeyCert: b.certPEM, KeyKey: b.keyPEM}
}

// tlsCertificate is the serving pair, for the TLS server.
func (b *bundle) tlsCertificate() (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(b.certPEM, b.keyPEM)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// parse reads a Secret's data. The first CA in ca.crt is the one whose
// key ca.key holds; others after it are retired CAs kept for the bundle.
func parse(data map[string][]byte) (*bundle, error) {
	b := &bundle{caPEM: data[KeyCA], caKeyPEM: data[KeyCAKey], certPEM: data[KeyCert], keyPEM: data[KeyKey]}
	var err error
	if b.ca, err = firstCert(b.caPEM); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCA, err)
	}
	if b.cert, err = firstCert(b.certPEM); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCert, err)
	}
	blk, _ := pem.Decode(b.caKeyPEM)
	if blk == nil {
		return nil, fmt.Errorf("%s holds no PEM block", KeyCAKey)
	}
	if b.caKey, err = x509.ParseECPrivateKey(blk.Bytes); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyCAKey, err)
	}
	if _, err := tls.X509KeyPair(b.certPEM, b.keyPEM); err != nil {
		return nil, fmt.Errorf("the serving pair: %w", err)
	}
	if err := b.cert.CheckSignatureFrom(b.ca); err != nil {
		return nil, fmt.Errorf("the serving certificate is not signed by the CA: %w", err)
	}
	return b, nil
}

func firstCert(p []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(p)
	if blk == nil || blk.Type != certBlock {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// fresh says whether b can be served as is for hosts at now: the serving
// certificate names exactly hosts and neither it nor the CA is due for
// renewal.
func (b *bundle) fresh(hosts []string, now time.Time) bool {
	return b.caFresh(now) && now.Add(servingRenew).Before(b.cert.NotAfter) && slices.Equal(sans(b.cert), sortedHosts(hosts))
}

func (b *bundle) caFresh(now time.Time) bool {
	return now.Add(caRenewBefore).Before(b.ca.NotAfter)
}

// renew returns a bundle that is fresh at now: the CA is kept when it is
// still fresh (so the caBundle does not change), else a new one is made
// and the old one stays in ca.crt behind it until it expires.
func renew(old *bundle, hosts []string, now time.Time) (*bundle, error) {
	b := &bundle{}
	if old != nil && old.caFresh(now) {
		b.ca, b.caKey, b.caPEM, b.caKeyPEM = old.ca, old.caKey, old.caPEM, old.caKeyPEM
	} else {
		if err := b.newCA(now); err != nil {
			return nil, err
		}
		if old != nil && now.Before(old.ca.NotAfter) {
			b.caPEM = append(bytes.Clone(b.caPEM), old.caPEM...)
		}
	}
	return b, b.newServing(hosts, now)
}

func (b *bundle) newCA(now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := template(now, CALifetime)
	tmpl.Subject = pkix.Name{CommonName: "agentrun-operator webhook CA"}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	b.ca, err = x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	b.caKey, b.caPEM = key, pem.EncodeToMemory(&pem.Block{Type: certBlock, Bytes: der})
	b.caKeyPEM, err = encodeKey(key)
	return err
}

func (b *bundle) newServing(hosts []string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := template(now, ServingLifetime)
	tmpl.Subject = pkix.Name{CommonName: hosts[0]}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range sortedHosts(hosts) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.ca, &key.PublicKey, b.caKey)
	if err != nil {
		return err
	}
	b.cert, err = x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	b.certPEM = pem.EncodeToMemory(&pem.Block{Type: certBlock, Bytes: der})
	b.keyPEM, err = encodeKey(key)
	return err
}

// template is a certificate valid from a minute before now (clock skew
// between the manager and the API server) for lifetime.
func template(now time.Time, lifetime time.Duration) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return &x509.Certificate{SerialNumber: serial, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(lifetime)}
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: keyBlock, Bytes: der}), nil
}

// sans are a certificate's DNS and IP names, sorted.
func sans(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedHosts(hosts []string) []string {
	out := slices.Clone(hosts)
	for i, h := range out {
		if ip := net.ParseIP(h); ip != nil {
			out[i] = ip.String()
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
