package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/callbacks"
)

// webhookReceiver verifies signatures and accepts each delivery id once,
// the way the docs tell receivers to.
type webhookReceiver struct {
	key []byte
	// hold, when set, blocks requests until released (to stop the manager
	// mid-delivery).
	hold chan struct{}

	mu       sync.Mutex
	accepted map[string]int
	requests int
	bad      int
	bodies   []map[string]any
}

func (w *webhookReceiver) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	w.requests++
	hold := w.hold
	w.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if err := callbacks.Verify(w.key, r.Header.Get(callbacks.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
		w.mu.Lock()
		w.bad++
		w.mu.Unlock()
		rw.WriteHeader(http.StatusUnauthorized)
		return
	}
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	w.mu.Lock()
	w.accepted[r.Header.Get(callbacks.HeaderDelivery)]++
	w.bodies = append(w.bodies, m)
	w.mu.Unlock()
	rw.WriteHeader(http.StatusNoContent)
}

func (w *webhookReceiver) counts() (accepted map[string]int, requests, bad int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.accepted {
		out[k] = v
	}
	return out, w.requests, w.bad
}

// TestCallbackDeliveredOnceAcrossARestart: the manager is stopped while the
// terminal delivery is in flight; the next manager sends it again with the
// same delivery id, signed, and status records it delivered. The signing
// key never shows in status or events.
func TestCallbackDeliveredOnceAcrossARestart(t *testing.T) {
	const key = "whsec-canary-5e1f"
	rc := &webhookReceiver{key: []byte(key), accepted: map[string]int{}, hold: make(chan struct{})}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	h1 := startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "single", map[string]string{"agent.toml": strings.ReplaceAll(oneStage, `"keyed"`, `"demo"`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createSecret(t, ns, "hook-key", map[string]string{"key": key})
	run := createRun(t, ns, "r", "single", func(r *arv1.AgentRun) {
		r.Spec.Metadata = map[string]string{"ticket": "OPS-7"}
		r.Spec.Callback = &arv1.CallbackSpec{URL: viaName(srv.URL) + "/hook", SigningKeySecretRef: &arv1.SecretKeyRef{Name: "hook-key", Key: "key"}}
	})
	waitFor(t, ns, "r", 20*time.Second, "Complete with the delivery pending", func(r *arv1.AgentRun) bool {
		return r.Status.Phase == arv1.PhaseComplete && r.Status.Callback != nil && r.Status.Callback.State == arv1.CallbackPending
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, reqs, _ := rc.counts(); reqs == 0; _, reqs, _ = rc.counts() {
		if time.Now().After(deadline) {
			t.Fatal("no delivery attempt reached the receiver")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h1.stop() // between the terminal transition and the delivery's end
	rc.mu.Lock()
	rc.hold = nil
	rc.mu.Unlock()

	startManager(t, managerOpts{})
	done := waitFor(t, ns, "r", 30*time.Second, "callback Delivered", func(r *arv1.AgentRun) bool {
		return r.Status.Callback != nil && r.Status.Callback.State == arv1.CallbackDelivered
	})
	accepted, _, bad := rc.counts()
	want := "agent_completed:" + string(run.UID)
	if len(accepted) != 1 || accepted[want] != 1 || bad != 0 {
		t.Fatalf("accepted = %v (bad signatures %d), want exactly one accepted delivery %s", accepted, bad, want)
	}
	if done.Status.Callback.DeliveryID != want || done.Status.Callback.DeliveredAt == nil {
		t.Errorf("callback status = %+v", done.Status.Callback)
	}
	if err := holdsFor(300*time.Millisecond, func() error {
		if again, _, _ := rc.counts(); again[want] != 1 {
			return fmt.Errorf("delivered %d times after being recorded", again[want])
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	body := rc.bodies[0]
	if body["event"] != "agent_completed" || body["phase"] != "Complete" || body["run_id"] != string(run.UID) {
		t.Errorf("body = %v", body)
	}
	if md, _ := body["metadata"].(map[string]any); md["ticket"] != "OPS-7" {
		t.Errorf("metadata not echoed: %v", body["metadata"])
	}
	raw, _ := json.Marshal(done)
	var evs corev1.EventList
	_ = k8s.List(context.Background(), &evs, client.InNamespace(ns))
	evRaw, _ := json.Marshal(evs)
	for what, text := range map[string]string{"status": string(raw), "events": string(evRaw), "logs": logSink.String()} {
		if strings.Contains(text, key) {
			t.Errorf("the signing key appears in %s", what)
		}
	}
}

// TestCallbackWaitsForItsSigningKey: a missing signing key Secret holds the
// delivery (recorded in status) and creating it sends the delivery.
func TestCallbackWaitsForItsSigningKey(t *testing.T) {
	rc := &webhookReceiver{key: []byte("late-key"), accepted: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "single", map[string]string{"agent.toml": strings.ReplaceAll(oneStage, `"keyed"`, `"demo"`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "r", "single", func(r *arv1.AgentRun) {
		r.Spec.Callback = &arv1.CallbackSpec{URL: viaName(srv.URL), SigningKeySecretRef: &arv1.SecretKeyRef{Name: "late", Key: "k"}}
	})
	waiting := waitFor(t, ns, "r", 20*time.Second, "delivery waiting on its key", func(r *arv1.AgentRun) bool {
		return r.Status.Callback != nil && strings.Contains(r.Status.Callback.LastError, "late")
	})
	if waiting.Status.Callback.State != arv1.CallbackPending {
		t.Errorf("state = %s, want Pending", waiting.Status.Callback.State)
	}
	createSecret(t, ns, "late", map[string]string{"k": "late-key"})
	waitFor(t, ns, "r", 20*time.Second, "Delivered once the key exists", func(r *arv1.AgentRun) bool {
		return r.Status.Callback.State == arv1.CallbackDelivered
	})
	if accepted, _, bad := rc.counts(); len(accepted) != 1 || bad != 0 {
		t.Errorf("accepted %v, bad %d", accepted, bad)
	}
}
