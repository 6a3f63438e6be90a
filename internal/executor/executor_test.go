package executor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// wait bounds every wait, so a bug fails the test instead of hanging it.
const wait = 5 * time.Second

func wakeFor(name string) event.GenericEvent {
	return event.GenericEvent{Object: &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}}
}

func key(run string, seq int64) Key { return Key{Run: types.UID(run), Seq: seq} }

// nextEvent returns the name of the next wake event.
func nextEvent(t *testing.T, p *Pool) string {
	t.Helper()
	select {
	case ev := <-p.Events():
		return ev.Object.GetName()
	case <-time.After(wait):
		t.Fatalf("no wake event within %s", wait)
		return ""
	}
}

// noEvent checks that no wake event is waiting. An event sent late would be
// missed, so it can only fail to catch a bug, never report a false one.
func noEvent(t *testing.T, p *Pool, within time.Duration) {
	t.Helper()
	select {
	case ev := <-p.Events():
		t.Fatalf("unexpected wake event for %q", ev.Object.GetName())
	case <-time.After(within):
	}
}

func recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// blocker is a step that reports when it starts and runs until released
// or cancelled.
type blocker struct {
	started chan struct{}
	release chan struct{}
	ended   chan error // ctx.Err() when the step ended
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}), release: make(chan struct{}), ended: make(chan error, 1)}
}

func (b *blocker) fn(ctx context.Context) {
	close(b.started)
	select {
	case <-b.release:
		b.ended <- ctx.Err()
	case <-ctx.Done():
		b.ended <- ctx.Err()
	case <-time.After(wait):
		b.ended <- errors.New("never released")
	}
}

func (b *blocker) endErr(t *testing.T) error {
	t.Helper()
	select {
	case err := <-b.ended:
		return err
	case <-time.After(wait):
		t.Fatalf("step did not end within %s", wait)
		return nil
	}
}

// inFlight reports whether the step is reserved or running.
func inFlight(p *Pool, k Key) bool { return p.InFlightSeqs(k.Run)[k.Seq] }

func TestNewSize(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{-3, 1}, {0, 1}, {1, 1}, {4, 4}} {
		p := New(tc.in, 0)
		if p.Size() != tc.want || p.Busy() != 0 {
			t.Errorf("New(%d): size %d busy %d, want %d 0", tc.in, p.Size(), p.Busy(), tc.want)
		}
	}
}

func TestSubmitRunsFnAndWakes(t *testing.T) {
	p := New(2, 0)
	ran := make(chan struct{})
	var gotCtx context.Context
	if !p.Submit(Step{Key: key("a", 1), Wake: wakeFor("run-a")}, func(ctx context.Context) {
		gotCtx = ctx
		close(ran)
	}) {
		t.Fatal("Submit on an empty pool returned false")
	}
	recv(t, ran, "fn to run")
	if got := nextEvent(t, p); got != "run-a" {
		t.Errorf("wake event for %q, want run-a", got)
	}
	// The event is sent after the step is released: the woken reconcile
	// sees it finished.
	if inFlight(p, key("a", 1)) || p.RunInFlight("a") || p.Busy() != 0 {
		t.Errorf("after the wake: InFlight %v RunInFlight %v Busy %d", inFlight(p, key("a", 1)), p.RunInFlight("a"), p.Busy())
	}
	// The step's context is cancelled once fn returns.
	if gotCtx == nil || gotCtx.Err() == nil {
		t.Errorf("step context not cancelled after fn returned")
	}
	noEvent(t, p, 50*time.Millisecond)

	// The same key can run again once finished.
	again := make(chan struct{})
	if !p.Submit(Step{Key: key("a", 1), Wake: wakeFor("run-a")}, func(context.Context) { close(again) }) {
		t.Fatal("resubmitting a finished key returned false")
	}
	recv(t, again, "second run of the key")
	if got := nextEvent(t, p); got != "run-a" {
		t.Errorf("wake event for %q, want run-a", got)
	}
}

func TestPoolBoundsConcurrency(t *testing.T) {
	const n = 20
	p := New(2, 0)
	var running, maxRunning atomic.Int32
	track := func() func() {
		cur := running.Add(1)
		for {
			m := maxRunning.Load()
			if cur <= m || maxRunning.CompareAndSwap(m, cur) {
				break
			}
		}
		return func() { running.Add(-1) }
	}

	// Phase 1: 20 blocking steps at once; only 2 get a slot.
	release := make(chan struct{})
	started := make(chan struct{}, n)
	accepted := 0
	for i := 0; i < n; i++ {
		ok := p.Submit(Step{Key: key(fmt.Sprintf("r%d", i), 1), Wake: wakeFor(fmt.Sprintf("r%d", i))}, func(context.Context) {
			defer track()()
			started <- struct{}{}
			select {
			case <-release:
			case <-time.After(wait):
			}
		})
		if ok {
			accepted++
		}
	}
	if accepted != 2 {
		t.Fatalf("accepted %d of %d submissions into a pool of 2", accepted, n)
	}
	if p.Busy() != 2 {
		t.Errorf("Busy %d, want 2", p.Busy())
	}
	recv(t, started, "first step")
	recv(t, started, "second step")
	close(release)

	// Phase 2: drive all 20 runs to completion, re-submitting when woken,
	// the way the controller does. Each step yields to overlap with others.
	var ranMu sync.Mutex
	ran := map[string]int{}
	remaining := map[string]bool{}
	for i := 0; i < n; i++ {
		remaining[fmt.Sprintf("r%d", i)] = true
	}
	deadline := time.After(wait)
	for len(remaining) > 0 {
		progressed := false
		for name := range remaining {
			name := name
			ok := p.Submit(Step{Key: key(name, 2), Wake: wakeFor(name)}, func(context.Context) {
				defer track()()
				for i := 0; i < 50; i++ {
					runtime.Gosched()
				}
				ranMu.Lock()
				ran[name]++
				ranMu.Unlock()
			})
			if ok {
				delete(remaining, name)
				progressed = true
			}
		}
		if !progressed {
			select {
			case <-p.Events():
			case <-deadline:
				t.Fatalf("runs never got a slot: %d remaining", len(remaining))
			}
		}
	}
	// Wait for the last steps to finish.
	for p.Busy() > 0 {
		select {
		case <-p.Events():
		case <-deadline:
			t.Fatalf("pool still busy: %d", p.Busy())
		}
	}
	if m := maxRunning.Load(); m > 2 || m < 1 {
		t.Errorf("max concurrent steps %d, want 1..2", m)
	}
	ranMu.Lock()
	defer ranMu.Unlock()
	if len(ran) != n {
		t.Errorf("%d runs ran, want %d", len(ran), n)
	}
	for name, c := range ran {
		if c != 1 {
			t.Errorf("%s ran %d times, want 1", name, c)
		}
	}
}

func TestFullPoolWakesWaitingRun(t *testing.T) {
	p := New(1, 0)
	a := newBlocker()
	if !p.Submit(Step{Key: key("a", 1), Wake: wakeFor("run-a")}, a.fn) {
		t.Fatal("first Submit returned false")
	}
	recv(t, a.started, "step a")
	ranB := false
	if p.Submit(Step{Key: key("b", 1), Wake: wakeFor("run-b")}, func(context.Context) { ranB = true }) {
		t.Fatal("Submit into a full pool returned true")
	}
	if inFlight(p, key("b", 1)) || p.RunInFlight("b") {
		t.Error("a refused step is reported in flight")
	}
	noEvent(t, p, 20*time.Millisecond)
	// Asking again while waiting keeps one place in the queue.
	p.Submit(Step{Key: key("b", 1), Wake: wakeFor("run-b")}, func(context.Context) { ranB = true })
	if n := p.Waiting(); n != 1 {
		t.Errorf("Waiting = %d with run b refused (twice), want 1", n)
	}

	close(a.release)
	if err := a.endErr(t); err != nil {
		t.Errorf("released step saw ctx error %v", err)
	}
	got := map[string]bool{nextEvent(t, p): true, nextEvent(t, p): true}
	if !got["run-a"] || !got["run-b"] {
		t.Errorf("wake events %v, want run-a (finished) and run-b (waiting)", got)
	}
	if n := p.Waiting(); n != 0 {
		t.Errorf("Waiting = %d once run b was woken, want 0", n)
	}
	if ranB {
		t.Error("the refused fn ran")
	}
	// b is woken once only.
	noEvent(t, p, 50*time.Millisecond)

	// Woken, b now gets the slot.
	done := make(chan struct{})
	if !p.Submit(Step{Key: key("b", 1), Wake: wakeFor("run-b")}, func(context.Context) { close(done) }) {
		t.Fatal("woken run still refused")
	}
	recv(t, done, "step b")
	if got := nextEvent(t, p); got != "run-b" {
		t.Errorf("wake for %q, want run-b", got)
	}
}

// TestReserveThenStartOrRelease: a reserved slot counts as busy and in
// flight before anything runs; Release gives it back and wakes a waiting
// run, Start runs the step in it.
func TestReserveThenStartOrRelease(t *testing.T) {
	p := New(1, 0)
	ta, ok := p.Reserve(Step{Key: key("a", 1), Wake: wakeFor("run-a")})
	if !ok || ta == nil {
		t.Fatal("an empty pool refused a reservation")
	}
	if p.Busy() != 1 || !inFlight(p, key("a", 1)) {
		t.Errorf("reserved: busy %d, in flight %v", p.Busy(), inFlight(p, key("a", 1)))
	}
	if again, ok := p.Reserve(Step{Key: key("a", 1), Wake: wakeFor("run-a")}); !ok || again != nil {
		t.Error("reserving a reserved key again must start nothing and not be refused")
	}
	if tb, ok := p.Reserve(Step{Key: key("b", 1), Wake: wakeFor("run-b")}); ok || tb != nil {
		t.Fatal("a full pool granted a reservation")
	}
	ta.Release()
	if got := nextEvent(t, p); got != "run-b" {
		t.Errorf("wake for %q after a release, want the waiting run-b", got)
	}
	if p.Busy() != 0 || inFlight(p, key("a", 1)) {
		t.Errorf("released: busy %d, in flight %v", p.Busy(), inFlight(p, key("a", 1)))
	}
	ta.Start(func(context.Context) { t.Error("a released ticket ran its step") })
	ta.Release() // twice is harmless

	tb, ok := p.Reserve(Step{Key: key("b", 1), Wake: wakeFor("run-b")})
	if !ok {
		t.Fatal("woken run refused")
	}
	ran := make(chan struct{})
	tb.Start(func(context.Context) { close(ran) })
	recv(t, ran, "the started step")
	if got := nextEvent(t, p); got != "run-b" {
		t.Errorf("wake for %q, want run-b", got)
	}
	var nilTicket *Ticket
	nilTicket.Start(func(context.Context) { t.Error("a nil ticket ran its step") })
	nilTicket.Release()
}

// TestLaneLimitKeepsRoomForOthers: steps of one lane (one MCP server) take
// at most the lane limit, so a hung server leaves the rest of the pool to
// other runs; a run refused for its lane is woken when the lane frees.
func TestLaneLimitKeepsRoomForOthers(t *testing.T) {
	p := New(4, 2)
	if p.LaneLimit() != 2 {
		t.Fatalf("lane limit %d, want 2", p.LaneLimit())
	}
	hung := []*blocker{newBlocker(), newBlocker()}
	for i, b := range hung {
		if !p.Submit(Step{Key: key(fmt.Sprintf("h%d", i), 1), Lane: "mcp:dead", Wake: wakeFor(fmt.Sprintf("h%d", i))}, b.fn) {
			t.Fatalf("hung step %d refused", i)
		}
		recv(t, b.started, "hung step")
	}
	if p.Submit(Step{Key: key("h2", 1), Lane: "mcp:dead", Wake: wakeFor("h2")}, func(context.Context) {}) {
		t.Fatal("a third step of a lane limited to 2 started")
	}
	// Other runs still get the rest of the pool.
	for i := range 2 {
		done := make(chan struct{})
		if !p.Submit(Step{Key: key(fmt.Sprintf("o%d", i), 1), Wake: wakeFor("other")}, func(context.Context) { close(done) }) {
			t.Fatalf("a step outside the lane was refused with the lane full (%d)", i)
		}
		recv(t, done, "other step")
		nextEvent(t, p)
	}
	close(hung[0].release)
	got := map[string]bool{nextEvent(t, p): true, nextEvent(t, p): true}
	if !got["h0"] || !got["h2"] {
		t.Errorf("wake events %v, want h0 (finished) and h2 (waiting on the lane)", got)
	}
	close(hung[1].release)
	nextEvent(t, p)
}

// TestWaitingRunsAreWokenInOrder: runs refused for room are woken in the
// order they asked, as many as there are free slots.
func TestWaitingRunsAreWokenInOrder(t *testing.T) {
	p := New(1, 0)
	a := newBlocker()
	p.Submit(Step{Key: key("a", 1), Wake: wakeFor("a")}, a.fn)
	recv(t, a.started, "step a")
	for _, n := range []string{"w1", "w2", "w3"} {
		if p.Submit(Step{Key: key(n, 1), Wake: wakeFor(n)}, func(context.Context) {}) {
			t.Fatalf("%s got a slot of a full pool", n)
		}
	}
	close(a.release)
	if got := []string{nextEvent(t, p), nextEvent(t, p)}; got[0] != "a" || got[1] != "w1" {
		t.Errorf("wake events %v, want [a w1]: one free slot wakes the first waiter", got)
	}
	noEvent(t, p, 30*time.Millisecond)
}

func TestCancelForgetsWaitingRun(t *testing.T) {
	p := New(1, 0)
	a := newBlocker()
	p.Submit(Step{Key: key("a", 1), Wake: wakeFor("run-a")}, a.fn)
	recv(t, a.started, "step a")
	if p.Submit(Step{Key: key("b", 1), Wake: wakeFor("run-b")}, func(context.Context) {}) {
		t.Fatal("Submit into a full pool returned true")
	}
	if n := p.Waiting(); n != 1 {
		t.Errorf("Waiting = %d, want 1", n)
	}
	p.Cancel("b")
	if n := p.Waiting(); n != 0 {
		t.Errorf("Waiting = %d after Cancel, want 0", n)
	}
	close(a.release)
	if got := nextEvent(t, p); got != "run-a" {
		t.Errorf("wake for %q, want run-a", got)
	}
	noEvent(t, p, 100*time.Millisecond)
}

func TestSubmitInFlightKeyStartsNothing(t *testing.T) {
	p := New(2, 0)
	b := newBlocker()
	if !p.Submit(Step{Key: key("a", 1), Wake: wakeFor("first")}, b.fn) {
		t.Fatal("Submit returned false")
	}
	recv(t, b.started, "first step")
	var second atomic.Int32
	if !p.Submit(Step{Key: key("a", 1), Wake: wakeFor("second")}, func(context.Context) { second.Add(1) }) {
		t.Error("Submit of an in-flight key returned false")
	}
	if p.Busy() != 1 {
		t.Errorf("Busy %d after a duplicate Submit, want 1", p.Busy())
	}
	close(b.release)
	if got := nextEvent(t, p); got != "first" {
		t.Errorf("wake for %q, want first", got)
	}
	noEvent(t, p, 50*time.Millisecond)
	if second.Load() != 0 {
		t.Errorf("the duplicate fn ran %d times", second.Load())
	}
}

func TestInFlightRunInFlightBusy(t *testing.T) {
	p := New(3, 0)
	a1, a2, b1 := newBlocker(), newBlocker(), newBlocker()
	for _, s := range []struct {
		k Key
		b *blocker
	}{{key("a", 1), a1}, {key("a", 2), a2}, {key("b", 1), b1}} {
		if !p.Submit(Step{Key: s.k, Wake: wakeFor(string(s.k.Run))}, s.b.fn) {
			t.Fatalf("Submit %v returned false", s.k)
		}
		// In flight as soon as Submit returns, before fn has started.
		if !inFlight(p, s.k) {
			t.Errorf("%v not in flight right after Submit", s.k)
		}
	}
	for _, b := range []*blocker{a1, a2, b1} {
		recv(t, b.started, "step")
	}
	check := func(stage string, keys map[Key]bool, runs map[types.UID]bool, busy int) {
		t.Helper()
		for k, want := range keys {
			if got := inFlight(p, k); got != want {
				t.Errorf("%s: InFlight(%v) = %v, want %v", stage, k, got, want)
			}
		}
		for r, want := range runs {
			if got := p.RunInFlight(r); got != want {
				t.Errorf("%s: RunInFlight(%s) = %v, want %v", stage, r, got, want)
			}
		}
		if p.Busy() != busy {
			t.Errorf("%s: Busy %d, want %d", stage, p.Busy(), busy)
		}
	}
	check("all running",
		map[Key]bool{key("a", 1): true, key("a", 2): true, key("b", 1): true, key("a", 3): false, key("c", 1): false},
		map[types.UID]bool{"a": true, "b": true, "c": false}, 3)

	close(a1.release)
	nextEvent(t, p)
	check("a/1 done",
		map[Key]bool{key("a", 1): false, key("a", 2): true, key("b", 1): true},
		map[types.UID]bool{"a": true, "b": true}, 2)

	close(a2.release)
	nextEvent(t, p)
	check("a done",
		map[Key]bool{key("a", 2): false, key("b", 1): true},
		map[types.UID]bool{"a": false, "b": true}, 1)

	close(b1.release)
	nextEvent(t, p)
	check("all done", map[Key]bool{key("b", 1): false}, map[types.UID]bool{"b": false}, 0)
}

func TestCancelCancelsRunSteps(t *testing.T) {
	p := New(3, 0)
	a1, a2, b1 := newBlocker(), newBlocker(), newBlocker()
	p.Submit(Step{Key: key("a", 1), Wake: wakeFor("a1")}, a1.fn)
	p.Submit(Step{Key: key("a", 2), Wake: wakeFor("a2")}, a2.fn)
	p.Submit(Step{Key: key("b", 1), Wake: wakeFor("b1")}, b1.fn)
	for _, b := range []*blocker{a1, a2, b1} {
		recv(t, b.started, "step")
	}
	p.Cancel("a")
	for i, b := range []*blocker{a1, a2} {
		if err := b.endErr(t); !errors.Is(err, context.Canceled) {
			t.Errorf("step a/%d ended with %v, want context.Canceled", i+1, err)
		}
	}
	got := map[string]bool{nextEvent(t, p): true, nextEvent(t, p): true}
	if !got["a1"] || !got["a2"] {
		t.Errorf("wake events %v, want a1 and a2", got)
	}
	// b is untouched.
	if !inFlight(p, key("b", 1)) {
		t.Error("Cancel(a) stopped run b")
	}
	close(b1.release)
	if err := b1.endErr(t); err != nil {
		t.Errorf("step b ended with %v, want nil (released, not cancelled)", err)
	}
	if got := nextEvent(t, p); got != "b1" {
		t.Errorf("wake for %q, want b1", got)
	}
	// Cancelling a run with nothing running is harmless.
	p.Cancel("nobody")
}

func TestStartStopCancelsEverything(t *testing.T) {
	p := New(2, 0)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	startErr := make(chan error, 1)
	go func() { startErr <- p.Start(ctx) }()

	a, b := newBlocker(), newBlocker()
	p.Submit(Step{Key: key("a", 1), Wake: wakeFor("a")}, a.fn)
	p.Submit(Step{Key: key("b", 1), Wake: wakeFor("b")}, b.fn)
	recv(t, a.started, "step a")
	recv(t, b.started, "step b")

	select {
	case err := <-startErr:
		t.Fatalf("Start returned %v before its context was cancelled", err)
	default:
	}
	stop()
	for name, bl := range map[string]*blocker{"a": a, "b": b} {
		if err := bl.endErr(t); !errors.Is(err, context.Canceled) {
			t.Errorf("step %s ended with %v, want context.Canceled", name, err)
		}
	}
	select {
	case err := <-startErr:
		if err != nil {
			t.Errorf("Start returned %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Start did not return after its context was cancelled")
	}

	// Slots are freed even though the wake events may be dropped.
	deadline := time.After(wait)
	for p.Busy() > 0 || p.RunInFlight("a") || p.RunInFlight("b") {
		select {
		case <-deadline:
			t.Fatalf("steps still held after stop: busy %d", p.Busy())
		case <-p.Events():
		case <-time.After(time.Millisecond):
		}
	}

	// A step submitted after the stop starts already cancelled: nothing
	// outlives the manager.
	late := make(chan error, 1)
	if p.Submit(Step{Key: key("c", 1), Wake: wakeFor("c")}, func(ctx context.Context) { late <- ctx.Err() }) {
		select {
		case err := <-late:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("step submitted after stop got ctx error %v, want context.Canceled", err)
			}
		case <-time.After(wait):
			t.Fatal("step submitted after stop never ran")
		}
	}
}

// TestOnlyRemote: a run whose every reserved or running step is in a lane
// waits on remote servers only; one local step (a model call) or none at
// all is not that.
func TestOnlyRemote(t *testing.T) {
	p := New(8, 4)
	run := key("r", 1).Run
	if p.OnlyRemote(run) {
		t.Fatal("a run with nothing in flight counts as waiting on a remote")
	}
	tool := newBlocker()
	p.Submit(Step{Key: key("r", 1), Lane: "mcp:slow", Wake: wakeFor("r")}, tool.fn)
	recv(t, tool.started, "tool step")
	if !p.OnlyRemote(run) {
		t.Fatal("a run with only a tool call running does not count as waiting on a remote")
	}
	model, ok := p.Reserve(Step{Key: key("r", 2), Wake: wakeFor("r")})
	if !ok || model == nil {
		t.Fatal("the model step was refused")
	}
	if p.OnlyRemote(run) {
		t.Fatal("a run with a model call reserved counts as waiting on a remote only")
	}
	model.Release()
	if !p.OnlyRemote(run) {
		t.Fatal("releasing the model step left the run not waiting on its tool call")
	}
	close(tool.release)
	nextEvent(t, p)
	if p.OnlyRemote(run) {
		t.Fatal("a finished tool step still counts")
	}
}

// TestTakeLaneCountsAgainstTheLane: a running step that goes on to call a
// lane's remote takes a slot of that lane; the lane's limit holds for it,
// and giving it back wakes a run waiting on the lane.
func TestTakeLaneCountsAgainstTheLane(t *testing.T) {
	p := New(8, 2)
	r1, ok1 := p.TakeLane("mcp:a")
	r2, ok2 := p.TakeLane("mcp:a")
	if !ok1 || !ok2 {
		t.Fatal("the lane refused its first two slots")
	}
	if _, ok := p.TakeLane("mcp:a"); ok {
		t.Fatal("a third slot of a lane limited to 2 was taken")
	}
	if !p.LaneFull("mcp:a") || p.LaneFull("mcp:b") {
		t.Fatalf("LaneFull a=%v b=%v, want true false", p.LaneFull("mcp:a"), p.LaneFull("mcp:b"))
	}
	if p.Submit(Step{Key: key("w", 1), Lane: "mcp:a", Wake: wakeFor("w")}, func(context.Context) {}) {
		t.Fatal("a step of the full lane started")
	}
	r1()
	r1() // given back once only
	if got := nextEvent(t, p); got != "w" {
		t.Fatalf("woke %q, want w (waiting on the lane)", got)
	}
	if _, ok := p.TakeLane("mcp:a"); !ok {
		t.Fatal("the slot given back could not be taken again")
	}
	r2()
	if p.Busy() != 0 {
		t.Errorf("busy %d: a lane slot must not take a pool slot (the step holds one already)", p.Busy())
	}
}
