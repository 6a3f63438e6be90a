package controllers_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/eventsink"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/snapshotgc"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
)

// startManagerWith runs a manager with the given options (tests that need
// admission or retention settings).
func startManagerWith(t *testing.T, o manager.Options) *providers.Scripted {
	t.Helper()
	o.MetricsAddr, o.ProbeAddr, o.SkipNameValidation = "0", "0", true
	if len(o.Egress.AllowCIDRs)+len(o.Egress.DenyCIDRs)+len(o.Egress.AllowHosts)+len(o.Egress.DenyHosts) == 0 {
		o.Egress = loopbackEgress()
	}
	if o.EgressOptions == nil {
		o.EgressOptions = suiteEgressOptions()
	}
	if o.Scripted == nil {
		o.Scripted = providers.NewScripted()
	}
	if o.Store.DSN == "" {
		o.Store.DSN = storeDSN(t)
	}
	mgr, err := manager.New(env.Config, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return o.Scripted
}

// TestFinishedRunsLeaveOneObject: a finished run leaves its journal
// ConfigMap (holding its output too) and one event, and every run of the
// same blueprint shares one snapshot.
func TestFinishedRunsLeaveOneObject(t *testing.T) {
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": stages(3)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	const n = 5
	for i := range n {
		createRun(t, ns, fmt.Sprintf("r%d", i), "three")
	}
	for i := range n {
		waitFor(t, ns, fmt.Sprintf("r%d", i), 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	// Events may give way to the runs' writes for up to DefaultGiveWayFor:
	// look for a second one of a run for that long, so every one the runs
	// leave is in to be counted.
	if err := holdsFor(eventsink.DefaultGiveWayFor+500*time.Millisecond, func() error {
		var evs eventsv1.EventList
		if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		events := map[string]int{}
		for _, e := range evs.Items {
			if events[e.Regarding.Name]++; events[e.Regarding.Name] > 1 {
				return fmt.Errorf("%s left %d events, want at most one", e.Regarding.Name, events[e.Regarding.Name])
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var evs eventsv1.EventList
	if err := k8s.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	owned, snapshots := map[string]int{}, 0
	for _, cm := range cms.Items {
		switch {
		case cm.Labels[configmaps.LabelRunUID] != "":
			owned[cm.Labels[configmaps.LabelRunUID]]++
		case strings.HasPrefix(cm.Name, "agentrun-blueprint-"):
			snapshots++
		}
	}
	events := map[string]int{}
	for _, e := range evs.Items {
		events[e.Regarding.Name]++
	}
	for i := range n {
		run := getRun(t, ns, fmt.Sprintf("r%d", i))
		objs, evN := owned[string(run.UID)], events[run.Name]
		if objs != 1 || objs+evN > 2 {
			t.Errorf("%s left %d objects and %d events, want its journal and at most one event", run.Name, objs, evN)
		}
		if fo := run.Status.FinalOutput; fo == nil || fo.ObjectName != run.Name+"-journal" {
			t.Errorf("%s: output descriptor %+v, want it in the journal object", run.Name, fo)
		}
	}
	if snapshots != 1 {
		t.Errorf("%d blueprint snapshots for %d runs of one blueprint, want 1", snapshots, n)
	}
	out := &corev1.ConfigMap{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "r0-journal"}, out); err != nil || out.Data[configmaps.OutputKey] != "all done" {
		t.Errorf("output in the journal object: %q (%v)", out.Data[configmaps.OutputKey], err)
	}
}

// TestRetentionDeletesAfterTheWebhook: a run with ttlSecondsAfterFinished
// is deleted with its journal once its webhook is delivered, never before;
// a fan-out parent goes with its workers and theirs; a run without a TTL is
// kept when the manager has no default.
func TestRetentionDeletesAfterTheWebhook(t *testing.T) {
	rc := &webhookReceiver{key: []byte("k"), accepted: map[string]int{}, hold: make(chan struct{})}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	startManager(t, managerOpts{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": stages(3)})
	createConfigMap(t, ns, "fan", map[string]string{"agent.toml": fanOutBlueprint(3, 3, "continue", 1, 0)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createSecret(t, ns, "hook-key", map[string]string{"key": "k"})
	hooked := createRun(t, ns, "hooked", "three", func(r *arv1.AgentRun) {
		r.Spec.TTLSecondsAfterFinished = ptr.To[int32](1)
		r.Spec.Callback = &arv1.CallbackSpec{URL: viaName(hook.URL), SigningKeySecretRef: &arv1.SecretKeyRef{Name: "hook-key", Key: "key"}}
	})
	parent := createRun(t, ns, "parent", "fan", func(r *arv1.AgentRun) { r.Spec.TTLSecondsAfterFinished = ptr.To[int32](1) })
	createRun(t, ns, "kept", "three")

	waitFor(t, ns, "hooked", 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	// Past its TTL, while the receiver holds the delivery, it stays.
	if err := holdsFor(2500*time.Millisecond, func() error {
		if r := getRun(t, ns, "hooked"); r.Status.Callback == nil || r.Status.Callback.State != arv1.CallbackPending {
			return fmt.Errorf("callback %+v, want the delivery still pending", r.Status.Callback)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	close(rc.hold)
	gone(t, ns, "hooked", 15*time.Second)
	if accepted, _, _ := rc.counts(); accepted["agent_completed:"+string(hooked.UID)] != 1 {
		t.Errorf("deliveries %v: the run went before its webhook was delivered once", accepted)
	}
	gone(t, ns, "parent", 30*time.Second)
	var left arv1.AgentRunList
	if err := k8s.List(context.Background(), &left, client.InNamespace(ns), client.MatchingLabels{arv1.LabelParentUID: string(parent.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d workers outlived their deleted parent", len(left.Items))
	}
	var cms corev1.ConfigMapList
	if err := k8s.List(context.Background(), &cms, client.InNamespace(ns), client.HasLabels{configmaps.LabelRunUID}); err != nil {
		t.Fatal(err)
	}
	kept := getRun(t, ns, "kept")
	for _, cm := range cms.Items {
		if cm.Labels[configmaps.LabelRunUID] != string(kept.UID) {
			t.Errorf("%s outlived its deleted run", cm.Name)
		}
	}
	if kept.Status.Phase != arv1.PhaseComplete {
		t.Errorf("the run without a TTL is %s", kept.Status.Phase)
	}
}

// TestDefaultRetentionSparesGitOpsRuns: the manager's default TTL deletes
// finished runs, but not one an Argo CD or Flux application manages (it
// would be applied again and run again).
func TestDefaultRetentionSparesGitOpsRuns(t *testing.T) {
	startManagerWith(t, manager.Options{TTLAfterFinished: ptr.To(time.Second)})
	ns := newNamespace(t)
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": stages(3)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createRun(t, ns, "plain", "three")
	createRun(t, ns, "argo", "three", func(r *arv1.AgentRun) {
		r.Labels = map[string]string{"argocd.argoproj.io/instance": "agents"}
	})
	createRun(t, ns, "flux", "three", func(r *arv1.AgentRun) {
		r.Labels = map[string]string{"kustomize.toolkit.fluxcd.io/name": "agents"}
	})
	gone(t, ns, "plain", 30*time.Second)
	for _, name := range []string{"argo", "flux"} {
		waitFor(t, ns, name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	if err := holdsFor(2*time.Second, func() error {
		for _, name := range []string{"argo", "flux"} {
			getRun(t, ns, name) // fails the test if it went
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// gone waits for a run to be deleted.
func gone(t *testing.T, ns, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &arv1.AgentRun{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s still exists after %s (err %v)", ns, name, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAdmissionIsFirstComeFirstServed: with 3 active-run slots, 24 runs
// created in order finish roughly in that order (the first created all
// finish before the last created), every run reads Queued until it is
// taken up, and runs waiting for a slot longer than a moment say why.
func TestAdmissionIsFirstComeFirstServed(t *testing.T) {
	startManagerWith(t, manager.Options{MaxActiveRuns: 3, MaxConcurrentSteps: 3})
	ns := newNamespace(t)
	paced := strings.ReplaceAll(stages(3), "text = ", "delay_ms = 400\ntext = ")
	createConfigMap(t, ns, "paced", map[string]string{"agent.toml": paced})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	reasons := watchReasons(t, ns)
	var mu sync.Mutex
	var order []string
	phases := map[string][]arv1.Phase{} // each run's phases as watched, repeats dropped
	w, err := watchClient(t).Watch(context.Background(), &arv1.AgentRunList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*arv1.AgentRun)
			if !ok {
				continue
			}
			mu.Lock()
			if seen := phases[r.Name]; len(seen) == 0 || seen[len(seen)-1] != r.Status.Phase {
				phases[r.Name] = append(seen, r.Status.Phase)
			}
			if r.Status.Phase == arv1.PhaseComplete && !slices.Contains(order, r.Name) {
				order = append(order, r.Name)
			}
			mu.Unlock()
		}
	}()
	const n = 24
	for i := range n {
		createRun(t, ns, fmt.Sprintf("r%02d", i), "paced")
		if i%8 == 7 {
			time.Sleep(1100 * time.Millisecond) // creation times have whole seconds
		}
	}
	for i := range n {
		waitFor(t, ns, fmt.Sprintf("r%02d", i), 90*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	}
	// The watch sees the last completions a little after the reads above.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		seen := len(order)
		mu.Unlock()
		if seen == n || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	pos := map[string]int{}
	for i, name := range order {
		pos[name] = i
	}
	lastOfFirst, firstOfLast := 0, n
	for i := range 8 {
		lastOfFirst = max(lastOfFirst, pos[fmt.Sprintf("r%02d", i)])
		firstOfLast = min(firstOfLast, pos[fmt.Sprintf("r%02d", n-8+i)])
	}
	t.Logf("completion order: %v", order)
	if lastOfFirst >= firstOfLast {
		t.Errorf("the first 8 created finished as late as position %d, the last 8 as early as %d: not first come, first served", lastOfFirst, firstOfLast)
	}
	if !reasons()[arv1.ReasonQueued] {
		t.Errorf("no run waiting for a slot showed %s; reasons seen %v", arv1.ReasonQueued, reasons())
	}
	// Every run reads Queued from its creation (the status default, no
	// write) until it is taken up, and never again after.
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		seen := phases[name]
		if len(seen) < 2 || seen[0] != arv1.PhaseQueued || slices.Contains(seen[1:], arv1.PhaseQueued) || slices.Contains(seen, "") {
			t.Errorf("%s went through phases %v, want Queued first and only first", name, seen)
		}
	}
	for i := range n {
		r := getRun(t, ns, fmt.Sprintf("r%02d", i))
		if c := meta.FindStatusCondition(r.Status.Conditions, arv1.ConditionReady); c == nil || c.Status != "True" {
			t.Errorf("%s: Ready %+v", r.Name, c)
		}
	}
}

func watchClient(t *testing.T) client.WithWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return wc
}

// TestUnusedSnapshotsAreSwept: a blueprint snapshot no run refers to any
// more is deleted by the sweeper; one a run refers to stays.
func TestUnusedSnapshotsAreSwept(t *testing.T) {
	startManagerWith(t, manager.Options{SnapshotSweep: snapshotgc.Sweep{Every: 200 * time.Millisecond, Grace: time.Millisecond}})
	ns := newNamespace(t)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	createConfigMap(t, ns, "bp", map[string]string{"agent.toml": stages(1)})
	a := waitFor(t, ns, createRun(t, ns, "a", "bp").Name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	// A second ConfigMap, not an edit of the first: the manager reads
	// blueprints from its cache, which may not have the edit yet when a
	// run created right after it is first reconciled.
	createConfigMap(t, ns, "bp2", map[string]string{"agent.toml": stages(2)})
	b := waitFor(t, ns, createRun(t, ns, "b", "bp2").Name, 30*time.Second, "Complete", phaseIs(arv1.PhaseComplete))
	if a.Status.BlueprintSnapshot == b.Status.BlueprintSnapshot {
		t.Fatalf("two blueprint texts share snapshot %s", a.Status.BlueprintSnapshot)
	}
	if err := k8s.Delete(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: a.Status.BlueprintSnapshot}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unused snapshot %s is still there (%v)", a.Status.BlueprintSnapshot, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// More sweeps leave it.
	if err := holdsFor(500*time.Millisecond, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: b.Status.BlueprintSnapshot}, &corev1.ConfigMap{}); err != nil {
			return fmt.Errorf("the snapshot run b refers to was swept: %v", err)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestRunsInAToolCallHoldNoActiveSlot: runs whose tool calls sit on a
// server that does not answer give their active-run slots back, so with
// every slot's run stuck in such a call a new run is still admitted and
// completes; the stuck runs complete once the server answers.
func TestRunsInAToolCallHoldNoActiveSlot(t *testing.T) {
	srv := mcptest.New(t, mcptest.Options{})
	entered, release := srv.Hold("read_doc")
	defer release()
	startManagerWith(t, manager.Options{MaxActiveRuns: 2, MaxConcurrentSteps: 8, MaxStepsPerServer: 4})
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent(srv.URL(), "", "", `read_doc {"id":"a"}`)})
	createConfigMap(t, ns, "three", map[string]string{"agent.toml": stages(3)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	for i := range 2 {
		createRun(t, ns, fmt.Sprintf("stuck%d", i), "tooling")
	}
	for i := range 2 {
		select {
		case <-entered:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of the 2 tool calls reached the server", i)
		}
	}
	createRun(t, ns, "fresh", "three")
	waitFor(t, ns, "fresh", 30*time.Second, "Complete beside two runs stuck in tool calls", phaseIs(arv1.PhaseComplete))
	for i := range 2 {
		if r := getRun(t, ns, fmt.Sprintf("stuck%d", i)); r.Status.Phase.IsTerminal() {
			t.Fatalf("stuck%d ended %s while its call was held", i, r.Status.Phase)
		}
	}
	release()
	for i := range 2 {
		waitFor(t, ns, fmt.Sprintf("stuck%d", i), 30*time.Second, "Complete once the server answers", phaseIs(arv1.PhaseComplete))
	}
}

// TestDeadToolServerRetriesCostNoWrites: runs parked on an MCP server
// whose listings fail stay parked, their status untouched, while the
// server is listed again and again (a run looking while another run's
// retry is under way included); the retries cost the API server nothing.
func TestDeadToolServerRetriesCostNoWrites(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			// Each listing fails, after a while: the runs' retry timers
			// fire while it is under way.
			time.AfterFunc(700*time.Millisecond, func() { _ = c.Close() })
		}
	}()
	startManagerWith(t, manager.Options{ToolListingRetry: 200 * time.Millisecond})
	ns := newNamespace(t)
	createConfigMap(t, ns, "tooling", map[string]string{"agent.toml": toolAgent("http://"+ln.Addr().String()+"/mcp", "", "", `read_doc {"id":"a"}`)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	names := []string{"r0", "r1", "r2"}
	for _, name := range names {
		createRun(t, ns, name, "tooling")
	}
	for _, name := range names {
		waitFor(t, ns, name, 30*time.Second, "parked on the dead server", func(r *arv1.AgentRun) bool {
			return r.Status.WaitingOn != nil && r.Status.WaitingOn.Blocker == arv1.BlockerToolServerUnavailable
		})
	}
	// Once the parks' own writes have landed, note where each run is.
	before := steady(t, time.Second, 30*time.Second, "the parked runs' resourceVersions", func() map[string]string {
		rvs := map[string]string{}
		for _, name := range names {
			rvs[name] = getRun(t, ns, name).ResourceVersion
		}
		return rvs
	})
	from := accepted.Load()
	deadline := time.Now().Add(30 * time.Second)
	for accepted.Load() < from+4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	retries := accepted.Load() - from
	if retries < 4 {
		t.Fatalf("the dead server was listed %d more times in 30s, want at least 4 retries", retries)
	}
	for _, name := range names {
		if after := getRun(t, ns, name); after.ResourceVersion != before[name] {
			t.Errorf("%s was written during %d retries of its server (resourceVersion %s -> %s; now waitingOn %+v, conditions %+v)",
				name, retries, before[name], after.ResourceVersion, after.Status.WaitingOn, after.Status.Conditions)
		}
	}
}
