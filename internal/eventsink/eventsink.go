// Package eventsink records Kubernetes Events (events.k8s.io/v1) for the
// operator's runs with one create each and nothing kept afterwards. The
// client-go broadcaster keeps every event it sent for several minutes to
// build series, which for a burst of ten thousand runs is tens of
// megabytes of the manager's memory; the operator's events are few per run
// and rarely repeat, so a repeat of the same event about the same object
// within a window is simply dropped instead.
package eventsink

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
)

// Sink is an events.EventRecorder. Build it with New and add it to the
// manager (it sends from its own goroutines, so recording never waits on
// the API server).
type Sink struct {
	client     client.Client
	scheme     *runtime.Scheme
	controller string
	instance   string
	// repeat is how long an identical event about the same object is not
	// sent again.
	repeat time.Duration

	// GiveWay, when set, reports that the manager's own writes (status,
	// journal) are waiting on the API server: an Event then waits until
	// none is, or for at most giveWayFor (a Warning: warningGiveWayFor),
	// so a burst of runs ending is not slowed by its own Events. Set it
	// before Start.
	GiveWay           func() bool
	giveWayFor        time.Duration
	warningGiveWayFor time.Duration

	// queue holds Normal Events and warnings holds Warnings, each with its
	// own senders, so a Warning never waits behind Normal Events giving
	// way.
	queue    chan queued
	warnings chan queued
	mu       sync.Mutex
	seen     map[string]time.Time
}

// queued is an Event waiting to be sent, and since when.
type queued struct {
	e  *eventsv1.Event
	at time.Time
}

// DefaultGiveWayFor is the longest a Normal Event waits for the
// manager's other writes. It outlasts a burst: a thousand runs ending
// together take several seconds of a small API server's CPU, and an Event
// sent inside them (2 ms of the control plane's CPU, a tenth of what a run
// costs) delays the runs still ending; held this long, a burst's Events go
// out after it. Under a steady load one write is nearly always in flight,
// and Events then go out this late, never later; the queue holds this
// long's worth of them at up to 409 a second.
const DefaultGiveWayFor = 10 * time.Second

// DefaultWarningGiveWayFor is the longest a Warning Event waits: it may
// ask a person to act (a missing Secret, a call to settle), so it is held
// only briefly. The run's status says the same at once.
const DefaultWarningGiveWayFor = 2 * time.Second

// giveWayPoll is how often a waiting sender looks again.
const giveWayPoll = 10 * time.Millisecond

// queueSize bounds events of each type (Normal, Warning) waiting to be
// sent; past it they are dropped (and counted in
// agentrun_events_dropped_total) rather than blocking a reconcile. About
// 4 MiB a queue when full.
const queueSize = 4096

// senders is how many events of each type are sent at once. Each create
// waits on the API server, so one sender alone sends as fast as the API
// server answers one request: under a burst (a thousand runs ending or
// parking together) the Events lagged their runs by seconds and the queue
// filled.
const senders = 8

// seenSize bounds the repeats remembered.
const seenSize = 4096

// New makes a sink creating events as controller (reportingController)
// from this process (reportingInstance: the host name).
func New(c client.Client, scheme *runtime.Scheme, controller string) *Sink {
	host, _ := os.Hostname()
	return &Sink{client: c, scheme: scheme, controller: controller, instance: host, repeat: 5 * time.Minute,
		giveWayFor: DefaultGiveWayFor, warningGiveWayFor: DefaultWarningGiveWayFor,
		queue: make(chan queued, queueSize), warnings: make(chan queued, queueSize), seen: map[string]time.Time{}}
}

// Eventf implements events.EventRecorder.
func (s *Sink) Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	ref, ok := s.reference(regarding)
	if !ok {
		return
	}
	msg := fmt.Sprintf(note, args...)
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	if !s.first(digest(string(ref.UID), eventtype, reason, msg), time.Now()) {
		return
	}
	now := metav1.NowMicro()
	e := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ref.Name + "." + suffix(), Namespace: ref.Namespace},
		EventTime:  now, ReportingController: s.controller, ReportingInstance: s.instance,
		Action: action, Reason: reason, Regarding: ref, Note: msg, Type: eventtype,
	}
	if related != nil {
		if r, ok := s.reference(related); ok {
			e.Related = &r
		}
	}
	queue := s.queue
	if eventtype == corev1.EventTypeWarning {
		queue = s.warnings
	}
	select {
	case queue <- queued{e: e, at: time.Now()}:
	default:
		// Full: the API server is far behind. Events are best effort.
		metrics.EventsDropped.Inc()
	}
}

// first reports whether key was not recorded within the repeat window,
// and remembers it.
func (s *Sink) first(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.seen[key]; ok && now.Sub(at) < s.repeat {
		return false
	}
	if len(s.seen) >= seenSize {
		for k, at := range s.seen {
			if now.Sub(at) >= s.repeat || len(s.seen) >= seenSize {
				delete(s.seen, k)
			}
			if len(s.seen) < seenSize/2 {
				break
			}
		}
	}
	s.seen[key] = now
	return true
}

func (s *Sink) reference(obj runtime.Object) (corev1.ObjectReference, bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return corev1.ObjectReference{}, false
	}
	gvk, err := apiutil.GVKForObject(obj, s.scheme)
	if err != nil {
		return corev1.ObjectReference{}, false
	}
	return corev1.ObjectReference{
		APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: m.GetNamespace(), Name: m.GetName(),
		UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
	}, true
}

// Start sends queued events, several of each type at once, until ctx
// ends.
func (s *Sink) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() { s.send(ctx, s.queue, s.giveWayFor) })
		wg.Go(func() { s.send(ctx, s.warnings, s.warningGiveWayFor) })
	}
	wg.Wait()
	return nil
}

// send sends the events of queue one after another until ctx ends, each
// giving way for at most hold after it was recorded.
func (s *Sink) send(ctx context.Context, queue <-chan queued, hold time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-queue:
			if !s.giveWay(ctx, q.at.Add(hold)) {
				return
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_ = s.client.Create(sctx, q.e)
			cancel()
		}
	}
}

// giveWay waits while the manager's own writes are in flight, until
// until at the latest; false when ctx ended.
func (s *Sink) giveWay(ctx context.Context, until time.Time) bool {
	if s.GiveWay == nil || !s.GiveWay() {
		return true // the usual case: no timer made
	}
	t := time.NewTicker(giveWayPoll)
	defer t.Stop()
	for s.GiveWay() && time.Now().Before(until) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// NeedLeaderElection is false: every replica records its own runs' events.
func (s *Sink) NeedLeaderElection() bool { return false }

// digest keys a repeat by a short hash, so remembering thousands costs
// little.
func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return string(h.Sum(nil)[:12])
}

func suffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
