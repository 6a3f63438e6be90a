package controllers_test

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/internal/tracing"
)

// The suite runs one real control plane; each test starts its own manager
// against it and uses its own namespace.
var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(logSink), zap.UseDevMode(true)))
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stopSuiteStores()
	if code != 0 && os.Getenv("DUMP_LOGS") != "" {
		fmt.Fprintln(os.Stderr, logSink.String())
	}
	_ = env.Stop()
	os.Exit(code)
}

// logSink keeps every log line the managers write, so tests can search them
// (for secret values that must never appear).
var logSink = &syncBuffer{}

type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// capacity is the memory the buffer holds.
func (b *syncBuffer) capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return cap(b.buf)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// loopbackEgress is the egress policy of the suite's managers: the test
// servers (providertest, mcptest, webhook receivers) listen on 127.0.0.1,
// which the default policy refuses, so the tests opt it in explicitly.
// Naming the /32 also lifts the API server's protection (envtest's API
// server is on 127.0.0.1 too); egress_test.go runs its managers without
// this, to prove the defaults.
func loopbackEgress() egress.Config {
	return egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
}

// testResolver resolves the names tests use for their servers without DNS
// (anything else goes to the system resolver). spec.callback.url may not
// name a loopback address or localhost (the CRD refuses them), so webhook
// receivers on loopback are called by a name: viaName.
type testResolver map[string][]netip.Addr

func (r testResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if addrs, ok := r[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		var out []netip.Addr
		for _, a := range addrs {
			if network == "ip" || (network == "ip4") == a.Is4() {
				out = append(out, a)
			}
		}
		return out, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

// receiverHost resolves to 127.0.0.1 in the suite's managers.
const receiverHost = "receiver.loopback.test"

// suiteEgressOptions give the suite's managers testResolver's names.
func suiteEgressOptions() []egress.Option {
	return []egress.Option{egress.WithResolver(testResolver{receiverHost: {netip.MustParseAddr("127.0.0.1")}})}
}

// viaName rewrites a loopback test server's URL to reach it by
// receiverHost.
func viaName(url string) string {
	return strings.Replace(url, "//127.0.0.1:", "//"+receiverHost+":", 1)
}

// harness is one running manager.
type harness struct {
	scripted   *providers.Scripted
	reconciles sync.Map // types.NamespacedName -> *atomic.Int64
	stop       func()
}

type managerOpts struct {
	steps       int
	metricsAddr string
	// tracing, when Enabled, sends the manager's traces to an OTLP receiver.
	tracing tracing.Config
	// statusInterval is manager.Options.StatusInterval; unset, 1s: the
	// suite's tests watch runs move through stages in seconds.
	statusInterval time.Duration
	// identity is manager.Options.Identity; unset, the manager's default
	// (the same for every manager of the test process). A test that
	// restarts the manager names the new one, so status.driver shows when
	// the new manager has taken the run up and written its record.
	identity string
	// scheduleClock is manager.Options.ScheduleClock (schedule tests step
	// a fake one across schedule times).
	scheduleClock clock.PassiveClock
	// store is the manager's --store DSN, over the suite's (storeDSN);
	// "-": ConfigMaps.
	store string
	// clock is manager.Options.Clock (quota tests run it ahead, near a
	// period's end); quotaPolicy and quotaStatusInterval are the quota
	// admission policy it writes and how often quotas' status is
	// refreshed (quota_test.go).
	clock               clock.PassiveClock
	quotaPolicy         string
	quotaStatusInterval time.Duration
	// wrap, when set, wraps the manager's API server transport (faults
	// injected into its writes, faults_test.go).
	wrap func(http.RoundTripper) http.RoundTripper
	// namespaces scopes the manager to these namespaces (its
	// --namespaces), so runs other tests left behind are not its own.
	namespaces []string
}

func startManager(t *testing.T, o managerOpts) *harness {
	t.Helper()
	h := &harness{scripted: providers.NewScripted()}
	opts := manager.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		MaxConcurrentSteps:  o.steps,
		SkipNameValidation:  true,
		Scripted:            h.scripted,
		Egress:              loopbackEgress(),
		EgressOptions:       suiteEgressOptions(),
		Tracing:             o.tracing,
		StatusInterval:      cmp.Or(o.statusInterval, time.Second),
		Identity:            o.identity,
		ScheduleClock:       o.scheduleClock,
		Clock:               o.clock,
		QuotaPolicy:         o.quotaPolicy,
		QuotaStatusInterval: o.quotaStatusInterval,
		Namespaces:          o.namespaces,
		OnReconcile: func(n types.NamespacedName) {
			c, _ := h.reconciles.LoadOrStore(n, &atomic.Int64{})
			c.(*atomic.Int64).Add(1)
		},
	}
	if o.metricsAddr != "" {
		opts.MetricsAddr = o.metricsAddr
	}
	opts.Store.DSN = storeDSN(t)
	switch o.store {
	case "":
	case "-":
		opts.Store.DSN = "" // ConfigMaps, whatever the suite's store
	default:
		opts.Store.DSN = o.store
	}
	cfg := env.Config
	if o.wrap != nil {
		cfg = rest.CopyConfig(env.Config)
		cfg.Wrap(o.wrap)
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	var once sync.Once
	h.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(h.stop)
	return h
}

func (h *harness) reconcileCount(n types.NamespacedName) int64 {
	c, ok := h.reconciles.Load(n)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func createConfigMap(t testing.TB, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	if err := k8s.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func createSecret(t testing.TB, ns, name string, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func createRun(t testing.TB, ns, name, agent string, mutate ...func(*arv1.AgentRun)) *arv1.AgentRun {
	t.Helper()
	run := &arv1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       arv1.AgentRunSpec{Agent: agent, Task: "test task for " + name},
	}
	for _, m := range mutate {
		m(run)
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

func getRun(t testing.TB, ns, name string) *arv1.AgentRun {
	t.Helper()
	run := &arv1.AgentRun{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, run); err != nil {
		t.Fatal(err)
	}
	return run
}

// waitFor polls the run until cond holds or the timeout passes, and fails
// with the last status seen.
func waitFor(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*arv1.AgentRun) bool) *arv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var run *arv1.AgentRun
	for {
		run = getRun(t, ns, name)
		if cond(run) {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: timed out waiting for %s; phase=%s waitingOn=%+v error=%q stage=%q", ns, name, what, run.Status.Phase, run.Status.WaitingOn, run.Status.Error, run.Status.Stage)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdsFor looks, for the whole window, for check to fail, and returns
// its first failure. It proves that something does not happen, for which
// there is no event to wait on: call it only after a positive signal that
// the system has processed whatever could make it happen (a status that
// shows the change observed), so the look is not vacuous, and make the
// window longer than the thing it looks for would take.
func holdsFor(window time.Duration, check func() error) error {
	end := time.Now().Add(window)
	for {
		if err := check(); err != nil {
			return err
		}
		if time.Now().After(end) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// steady polls read until what it returns has not changed for quiet, and
// returns that value: it waits out trailing writes (the reconcile a status
// write triggers, an Event giving way) before a snapshot is taken, rather
// than sleeping for a guess. It fails the test if the value still moves
// after within.
func steady[T any](t testing.TB, quiet, within time.Duration, what string, read func() T) T {
	t.Helper()
	start := time.Now()
	last, since := read(), start
	for {
		time.Sleep(20 * time.Millisecond)
		now := time.Now()
		if v := read(); !reflect.DeepEqual(v, last) {
			last, since = v, now
		} else if now.Sub(since) >= quiet {
			return last
		}
		if now.Sub(start) > within {
			t.Fatalf("%s still changing after %v", what, within)
		}
	}
}

func phaseIs(p arv1.Phase) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool { return r.Status.Phase == p }
}

func blockedOn(b arv1.SetupBlocker) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool {
		w := r.Status.WaitingOn
		return r.Status.Phase == arv1.PhaseWaitingInput && w != nil && w.Reason == arv1.WaitNeedsSetup && w.Blocker == b
	}
}

func metaControllerOf(r *arv1.AgentRun) *metav1.OwnerReference { return metav1.GetControllerOf(r) }

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// journalEntries reads a run's journal back from where the test's store
// keeps it.
func journalEntries(t *testing.T, ns, uid string) []journal.Entry {
	t.Helper()
	var out []journal.Entry
	var err error
	if dsn := storeDSN(t); dsn != "" {
		out, err = storeReader(t, dsn).Entries(context.Background(), store.RunRef{Namespace: ns, UID: types.UID(uid)})
	} else {
		out, err = configmaps.Read(context.Background(), k8s, ns, types.UID(uid))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}
