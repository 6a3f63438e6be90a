package imagebuild

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// DebianCAs is where Debian's ca-certificates package puts its
// certificates, one PEM file each (the Mozilla CA list).
const DebianCAs = "/usr/share/ca-certificates/mozilla"

// CABundle concatenates the certificates of dir (*.crt), in name order,
// into one PEM bundle: what update-ca-certificates writes to
// /etc/ssl/certs/ca-certificates.crt from the package's files, without the
// local CAs a machine may add to that file (/usr/local/share/ca-certificates)
// or the package's certificates its administrator deselected.
func CABundle(dir string) ([]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no certificates in %s (Debian's ca-certificates package)", dir)
	}
	sort.Strings(files)
	var buf bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("-----BEGIN CERTIFICATE-----")) {
			return nil, fmt.Errorf("%s is not a PEM certificate", f)
		}
		buf.Write(b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes(), nil
}
