package loadtest_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/test/loadtest"
)

// schedulePeriod is the period of the schedule TestSchedulesSurviveKillsAndOutages drives.
const schedulePeriod = 10 * time.Second

// outage is a span the manager was down: from its SIGKILL to the start of
// the next manager process (started) and to its workers running (up).
type outage struct{ kill, started, up time.Time }

// TestSchedulesSurviveKillsAndOutages: a schedule firing every 10 s (a
// starting deadline of 10 s) driven by a manager process that is killed
// with SIGKILL four times around the moment a run is due (300 and 100 ms
// before, 20 and 300 ms after, in a random order) and restarted at once,
// then killed for a 20 s outage. Every scheduled time from the first run to the last has exactly
// one run (a create the kill interrupted, or a status write it lost, never
// doubles or drops a time: runs are named by their time); a short outage
// costs no time, and the 20 s one is caught up by exactly one run, for
// its latest missed time, never a storm of the others.
func TestSchedulesSurviveKillsAndOutages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and six manager processes")
	}
	c := sharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>7|1))
	t.Logf("seed %d", seed)

	ns, err := c.SetupNamespace(ctx, "schedkill", "bench", loadtest.ThreeStage)
	if err != nil {
		t.Fatal(err)
	}
	seat := newManagerSeat(t, ctx, c)
	start := func() time.Time {
		t.Helper()
		seat.Start()
		return time.Now()
	}
	start()
	s := &arv1.AgentRunSchedule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tick"},
		Spec: arv1.AgentRunScheduleSpec{
			Schedule: "*/10 * * * * *", StartingDeadlineSeconds: ptr.To[int64](10), ConcurrencyPolicy: arv1.ConcurrencyAllow,
			SuccessfulRunsHistoryLimit: ptr.To[int32](100), FailedRunsHistoryLimit: ptr.To[int32](100),
			Template: arv1.AgentRunTemplate{Spec: arv1.AgentRunSpec{Agent: "bench", Task: "tick"}},
		},
	}
	if err := c.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), s) })

	// nextTick is the grid point after now; sleepUntil waits until at.
	nextTick := func() time.Time { return time.Now().Truncate(schedulePeriod).Add(schedulePeriod) }
	sleepUntil := func(at time.Time) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Until(at)):
		}
	}
	var outages []outage
	kill := func() time.Time {
		t.Helper()
		at := time.Now()
		if err := seat.M.Kill(); err != nil {
			t.Fatal(err)
		}
		return at
	}

	// Four kills around the moment a run is due, each restarted at once.
	sleepUntil(nextTick().Add(time.Second)) // one regular run first
	offsets := []int{-300, -100, 20, 300}   // ms around the due time: before its create, and during or after it
	rng.Shuffle(len(offsets), func(i, j int) { offsets[i], offsets[j] = offsets[j], offsets[i] })
	for _, off := range offsets {
		sleepUntil(nextTick().Add(time.Duration(off) * time.Millisecond))
		o := outage{kill: kill(), started: time.Now()}
		o.up = start()
		outages = append(outages, o)
	}
	// A 20 s outage, the next manager started just after a grid point, so
	// the time it must catch up is that one.
	sleepUntil(nextTick().Add(time.Second))
	long := outage{kill: kill()}
	sleepUntil(long.kill.Add(20 * time.Second))
	sleepUntil(nextTick().Add(200 * time.Millisecond))
	long.started = time.Now()
	long.up = start()
	outages = append(outages, long)
	// Two regular runs after it.
	sleepUntil(nextTick().Add(schedulePeriod + 2*time.Second))

	var list arv1.AgentRunList
	if err := c.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{arv1.LabelSchedule: "tick"}); err != nil {
		t.Fatal(err)
	}
	times := map[int64]arv1.AgentRun{}
	for _, r := range list.Items {
		unix, err := strconv.ParseInt(strings.TrimPrefix(r.Name, "tick-"), 10, 64)
		if err != nil || !strings.HasPrefix(r.Name, "tick-") {
			t.Fatalf("run %s is not named tick-<unix seconds>", r.Name)
		}
		at := time.Unix(unix, 0).UTC()
		if r.Annotations[arv1.AnnotationScheduledAt] != at.Format(time.RFC3339) || unix%int64(schedulePeriod/time.Second) != 0 {
			t.Errorf("run %s: scheduled-at %q, want %s on the 10 s grid", r.Name, r.Annotations[arv1.AnnotationScheduledAt], at.Format(time.RFC3339))
		}
		times[unix] = r
	}
	keys := slices.Sorted(maps.Keys(times))
	if len(keys) < 6 {
		t.Fatalf("%d runs (%v), want a run for each of at least 6 times", len(keys), keys)
	}
	var spans []string
	for _, o := range outages {
		spans = append(spans, o.kill.Format("15:04:05.000")+" to "+o.started.Format("15:04:05.000")+" (up "+o.up.Format("15:04:05.000")+")")
	}
	t.Logf("runs at %v; outages %v", keys, spans)
	// within says how many grid points lie in (from, to) and which runs
	// hold them.
	within := func(from, to time.Time) (points []int64, runs []int64) {
		for g := from.Truncate(schedulePeriod).Add(schedulePeriod); g.Before(to); g = g.Add(schedulePeriod) {
			points = append(points, g.Unix())
			if _, ok := times[g.Unix()]; ok {
				runs = append(runs, g.Unix())
			}
		}
		return points, runs
	}
	for i, o := range outages {
		// What fell due while no manager ran, and while the next one
		// started: at most the latest of it is run (a catch-up).
		if points, runs := within(o.kill, o.started); len(points) > 0 && (len(runs) != 1 || runs[0] != points[len(points)-1]) {
			t.Errorf("outage %d (%s): runs for %v of the times %v, want exactly the latest caught up", i, spans[i], runs, points)
		}
	}
	if points, runs := within(long.kill, long.started); len(points) < 2 || len(runs) != 1 {
		t.Errorf("the 20 s outage missed times %v and caught up %v, want two or more missed and one caught up", points, runs)
	}
	// Every other time from the first run to the last has its run: times
	// an outage superseded (an earlier missed one) are the only gaps.
	superseded := map[int64]bool{}
	for _, o := range outages {
		points, _ := within(o.kill, o.started)
		for _, p := range points[:max(len(points)-1, 0)] {
			superseded[p] = true
		}
	}
	for g := keys[0]; g <= keys[len(keys)-1]; g += int64(schedulePeriod / time.Second) {
		if _, ok := times[g]; !ok && !superseded[g] {
			t.Errorf("no run for %s, which no outage superseded (runs %v)\nmanager log tail:\n%s", time.Unix(g, 0).UTC().Format(time.RFC3339), keys, seat.M.LogTail(4000))
		}
	}
}
