package history

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// A continue token says where a page ended and which list it belongs to,
// signed with the database's history key (HMAC-SHA256), so a client can
// neither forge one nor move it to another query. Records never change,
// so a page boundary stays valid; a token older than the TTL answers 410
// Expired all the same, as the API server's do, and the client lists
// again.

// pageToken is a continue token's content.
type pageToken struct {
	// Query is a digest of the namespace and selectors listed.
	Query string `json:"q"`
	// FinishedAt and UID are the page's last record.
	FinishedAt int64  `json:"f"`
	UID        string `json:"u"`
	// Issued is when the token was made (Unix seconds).
	Issued int64 `json:"t"`
}

// queryDigest names a list: its namespace and selectors.
func queryDigest(namespace, labelSelector, fieldSelector string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + labelSelector + "\x00" + fieldSelector))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func sign(key, payload []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(payload)
	return m.Sum(nil)
}

// encodeToken signs t.
func encodeToken(key []byte, t pageToken) string {
	payload, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(sign(key, payload))
}

// decodeToken checks a continue token: 400 when it is not one this
// server signed or belongs to another query, 410 when it is older than
// ttl.
func decodeToken(key []byte, token, query string, now time.Time, ttl time.Duration) (*sqlstore.RecordCursor, error) {
	invalid := apierrors.NewBadRequest("the continue token is not valid: it was not issued by this API (or was altered); list again without it")
	p, s, ok := strings.Cut(token, ".")
	if !ok {
		return nil, invalid
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p)
	mac, err2 := base64.RawURLEncoding.DecodeString(s)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, sign(key, payload)) {
		return nil, invalid
	}
	var t pageToken
	if err := json.Unmarshal(payload, &t); err != nil {
		return nil, invalid
	}
	if t.Query != query {
		return nil, apierrors.NewBadRequest("the continue token belongs to another list (another namespace or selector); list again without it")
	}
	if now.Sub(time.Unix(t.Issued, 0)) > ttl {
		return nil, apierrors.NewResourceExpired("the continue token has expired; list again without it")
	}
	return &sqlstore.RecordCursor{FinishedAt: t.FinishedAt, UID: t.UID}, nil
}

// onceOK remembers read's first answer that is not an error: the continue
// key is made once per database and never changes, so lists do not ask
// the database for it every time.
func onceOK(read func(context.Context) ([]byte, error)) func(context.Context) ([]byte, error) {
	var mu sync.Mutex
	var key []byte
	return func(ctx context.Context) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if key != nil {
			return key, nil
		}
		k, err := read(ctx)
		if err == nil {
			key = k
		}
		return k, err
	}
}
