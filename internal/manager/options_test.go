package manager

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// A journal chunk size outside what a ConfigMap allows, or so small that a
// long run would leave a crowd of objects, stops the manager at start with
// the flag's name, before it talks to the API server.
func TestJournalChunkBytesOutOfRangeIsRefused(t *testing.T) {
	for _, b := range []int{-1, configmaps.MinChunkBytes - 1, configmaps.MaxChunkBytes + 1, 1 << 20} {
		_, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{JournalChunkBytes: b})
		if err == nil || !strings.Contains(err.Error(), "--journal-chunk-bytes") {
			t.Errorf("JournalChunkBytes %d: %v, want a refusal naming --journal-chunk-bytes", b, err)
		}
	}
}
