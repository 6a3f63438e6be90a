package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// FrontProxyClientName is the common name of the API server's front-proxy
// client certificate, the one name aggregated API servers accept
// (--requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// enableAggregation turns on the aggregation layer of the API server: a
// front-proxy CA of its own, the client certificate the API server
// presents to aggregated API servers, and the request-header flags that
// tell them which headers carry the user. The API server publishes the CA
// and the header names in kube-system's extension-apiserver-authentication
// ConfigMap, where aggregated servers read them.
func enableAggregation(e *envtest.Environment, dir string) error {
	caFile, certFile, keyFile, err := writeFrontProxyCerts(dir)
	if err != nil {
		return err
	}
	args := e.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", caFile)
	args.Set("requestheader-allowed-names", FrontProxyClientName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-uid-headers", "X-Remote-Uid")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", certFile)
	args.Set("proxy-client-key-file", keyFile)
	return nil
}

// writeFrontProxyCerts makes the front-proxy CA and its client
// certificate in dir.
func writeFrontProxyCerts(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentrun test front-proxy CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: FrontProxyClientName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	caFile = filepath.Join(dir, "front-proxy-ca.crt")
	certFile = filepath.Join(dir, "front-proxy-client.crt")
	keyFile = filepath.Join(dir, "front-proxy-client.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", leafDER}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}
