package controllers_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/mcptool/mcptest"
	"github.com/agentrun-dev/agentrun-operator/internal/metrics"
	"github.com/agentrun-dev/agentrun-operator/internal/providers/providertest"
)

// The egress tests run managers with the production defaults (loopback,
// link-local, cloud metadata, the API server and the manager pod refused)
// plus exactly one opt-in, 127.0.0.2/32, where the allowed test servers
// listen. envtest's API server is on 127.0.0.1, so it stays protected.
// Names resolve through testResolver, so a name aimed at a refused address
// needs no DNS.
const (
	allowedAddr  = "127.0.0.2"
	recorderAddr = "127.0.0.3"
)

// recorder is a loopback listener that counts the connections it accepts
// and answers none: a refused destination must see zero.
type recorder struct {
	l net.Listener
	n atomic.Int64
}

func newRecorder(t *testing.T, ip string) *recorder {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listening on %s: %v", ip, err)
	}
	r := &recorder{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.n.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return r
}

// counterValue reads one counter of the manager's metrics.
func counterValue(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }

func (r *recorder) URL() string { return "http://" + r.l.Addr().String() }

func (r *recorder) port() string {
	_, p, _ := net.SplitHostPort(r.l.Addr().String())
	return p
}

func (r *recorder) sawNothing(t *testing.T, what string) {
	t.Helper()
	if n := r.n.Load(); n != 0 {
		t.Errorf("%s: the refused listener at %s accepted %d connections", what, r.l.Addr(), n)
	}
}

// egressFixture is what every egress test aims at.
type egressFixture struct {
	apiHost  string    // the API server's host:port
	apiAddr  *recorder // a listener on the API server's address, another port
	loopback *recorder // a listener on a loopback address nobody allowed
}

// startEgressManager starts a manager with the default egress policy plus
// 127.0.0.2/32, and the test names: metadata.test (169.254.169.254),
// apiserver.test (127.0.0.1), recorder.test (127.0.0.3) and allowed.test
// (127.0.0.2).
func startEgressManager(t *testing.T, o manager.Options) egressFixture {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if o.Egress.AllowCIDRs == nil {
		o.Egress = egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix(allowedAddr + "/32")}}
	}
	o.EgressOptions = []egress.Option{egress.WithResolver(testResolver{
		"metadata.test":  {netip.MustParseAddr("169.254.169.254")},
		"apiserver.test": {netip.MustParseAddr("127.0.0.1")},
		"recorder.test":  {netip.MustParseAddr(recorderAddr)},
		"allowed.test":   {netip.MustParseAddr(allowedAddr)},
		"allowed4.test":  {netip.MustParseAddr("127.0.0.4")},
	})}
	startManagerWith(t, o)
	return egressFixture{apiHost: u.Host, apiAddr: newRecorder(t, "127.0.0.1"), loopback: newRecorder(t, recorderAddr)}
}

// refusalText is the *egress.Refusal message a case must produce, exactly.
func refusalText(host, addr, ns, reason, rule string) string {
	if addr != "" && addr != host {
		host = fmt.Sprintf("%s (address %s)", host, addr)
	}
	return fmt.Sprintf("egress refused: %s for namespace %s: %s (rule %s)", host, ns, reason, rule)
}

// egressCase is one destination and what its refusal must say; want ""
// means allowed.
type egressCase struct {
	name, base string
	host, addr string
	reason     string
	rule       string
	remedy     string
}

func (c egressCase) want(ns string) string {
	if c.rule == "" {
		return ""
	}
	return refusalText(c.host, c.addr, ns, c.reason, c.rule)
}

const (
	reasonMetadata  = "cloud metadata service"
	reasonAPIServer = "the Kubernetes API server"
	reasonLoopback  = "loopback address"
)

// refusedTargets are the destinations every kind of call is aimed at.
func (f egressFixture) refusedTargets() []egressCase {
	return []egressCase{
		{name: "metadata", base: "http://169.254.169.254", host: "169.254.169.254", reason: reasonMetadata, rule: egress.RuleMetadata, remedy: "refused on purpose"},
		{name: "apiserver", base: "https://" + f.apiHost, host: "127.0.0.1", reason: reasonAPIServer, rule: egress.RuleAPIServer, remedy: "point the URL elsewhere"},
		{name: "apiserver-address", base: f.apiAddr.URL(), host: "127.0.0.1", reason: reasonAPIServer, rule: egress.RuleAPIServer, remedy: "point the URL elsewhere"},
		{name: "loopback", base: f.loopback.URL(), host: recorderAddr, reason: reasonLoopback, rule: egress.RuleLoopback, remedy: "--egress-allow-cidr=127.0.0.0/8"},
		{name: "name-to-metadata", base: "http://metadata.test", host: "metadata.test", addr: "169.254.169.254", reason: reasonMetadata, rule: egress.RuleMetadata, remedy: "refused on purpose"},
		{name: "name-to-loopback", base: "http://recorder.test:" + f.loopback.port(), host: "recorder.test", addr: recorderAddr, reason: reasonLoopback, rule: egress.RuleLoopback, remedy: "--egress-allow-cidr=127.0.0.0/8"},
	}
}

// redirector answers every request with a 307 to target (same path).
func redirector(t *testing.T, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", allowedAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func refusedWith(want, remedy string) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool {
		w := r.Status.WaitingOn
		return blockedOn(arv1.BlockerEgressRefused)(r) && strings.Contains(w.Remedy, want) && strings.Contains(w.Remedy, remedy)
	}
}

const egressProviderAgent = `
[agent]
name = "egress"
[agent.title]
enabled = false
[stages.only]
allow_complete = true
[stages.only.model]
models = [{provider = "p", model = "gpt-x"}]
`

// TestEgressRefusesProviderBaseURLs: a provider base URL aimed at the cloud
// metadata address, the API server, the API server's address on another
// port, a loopback listener, or a name resolving to one of them parks the
// run on NeedsSetup EgressRefused with the exact refusal and its remedy;
// so does an allowed provider that redirects to a refused address; the
// listeners see no connection; an allowed provider, by address or by
// name, completes the run.
func TestEgressRefusesProviderBaseURLs(t *testing.T) {
	f := startEgressManager(t, manager.Options{})
	ns := newNamespace(t)
	ok := providertest.NewOpenAIServerOn(t, allowedAddr+":0")
	ok.Push(providertest.Reply{ToolCall: &providertest.ToolCall{Name: "complete", Args: `{"output":"reached"}`}})
	_, okPort, _ := net.SplitHostPort(strings.TrimPrefix(ok.URL, "http://"))
	cases := append(f.refusedTargets(),
		egressCase{name: "redirect", base: redirector(t, f.loopback.URL()), host: recorderAddr, reason: reasonLoopback, rule: egress.RuleLoopback, remedy: "--egress-allow-cidr=127.0.0.0/8"},
		egressCase{name: "allowed", base: ok.URL},
		egressCase{name: "allowed-name", base: "http://allowed.test:" + okPort},
	)
	createConfigMap(t, ns, "egress", map[string]string{"agent.toml": egressProviderAgent})
	createSecret(t, ns, "p-key", map[string]string{"api-key": "sk-egress-test"})
	for _, c := range cases {
		createConfigMap(t, ns, "providers-"+c.name, map[string]string{"providers.toml": openAIEntry("p", c.base, false)})
		createRun(t, ns, c.name, "egress", func(r *arv1.AgentRun) { r.Spec.ProviderConfig = "providers-" + c.name })
	}
	for _, c := range cases {
		if want := c.want(ns); want != "" {
			waitFor(t, ns, c.name, 30*time.Second, "NeedsSetup EgressRefused: "+want, refusedWith(want, c.remedy))
		} else {
			waitFor(t, ns, c.name, 30*time.Second, "Complete through the allowed provider", phaseIs(arv1.PhaseComplete))
		}
	}
	f.apiAddr.sawNothing(t, "provider")
	f.loopback.sawNothing(t, "provider")
	if n := counterValue(metrics.EgressRefusals.WithLabelValues(ns, egress.RuleMetadata, egress.StageDial)); n < 2 {
		t.Errorf("agentrun_egress_refusals_total{namespace=%q,rule=metadata,stage=dial} = %v, want at least 2", ns, n)
	}
	if n := counterValue(metrics.EgressRefusals.WithLabelValues(ns, egress.RuleLoopback, egress.StageRedirect)); n < 1 {
		t.Errorf("the refused redirect was not counted (%v)", n)
	}
}

// TestEgressRefusesMCPServerURLs: the same destinations as MCP server URLs
// of a blueprint whose model calls one of the server's tools: the run
// parks on EgressRefused (not ToolServerUnavailable) with the exact
// refusal; nothing connects; an allowed server's tool is called and the
// run completes.
func TestEgressRefusesMCPServerURLs(t *testing.T) {
	f := startEgressManager(t, manager.Options{})
	ns := newNamespace(t)
	ok := mcptest.New(t, mcptest.Options{Addr: allowedAddr + ":0"})
	cases := append(f.refusedTargets(),
		egressCase{name: "redirect", base: redirector(t, f.loopback.URL()), host: recorderAddr, reason: reasonLoopback, rule: egress.RuleLoopback, remedy: "--egress-allow-cidr=127.0.0.0/8"},
		egressCase{name: "allowed", base: strings.TrimSuffix(ok.URL(), "/mcp")},
	)
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	for _, c := range cases {
		createConfigMap(t, ns, "tools-"+c.name, map[string]string{"agent.toml": toolAgent(c.base+"/mcp", "", "", `read_doc {"id":"a"}`)})
		createRun(t, ns, c.name, "tools-"+c.name)
	}
	for _, c := range cases {
		if want := c.want(ns); want != "" {
			run := waitFor(t, ns, c.name, 30*time.Second, "NeedsSetup EgressRefused: "+want, refusedWith(want, c.remedy))
			if !strings.Contains(run.Status.WaitingOn.Remedy, `MCP server "tracker" at `+c.base+"/mcp") {
				t.Errorf("%s: remedy %q does not name the server and its URL", c.name, run.Status.WaitingOn.Remedy)
			}
		} else {
			waitFor(t, ns, c.name, 30*time.Second, "Complete through the allowed server", phaseIs(arv1.PhaseComplete))
		}
	}
	if ok.Executed("read_doc") != 1 {
		t.Errorf("the allowed server executed read_doc %d times, want 1", ok.Executed("read_doc"))
	}
	f.apiAddr.sawNothing(t, "MCP")
	f.loopback.sawNothing(t, "MCP")
}

const msgCallbackAddress = "url must not point at a loopback, link-local (cloud metadata) or unspecified address: the manager refuses to call them"

// allowedReceiver is a webhook receiver on 127.0.0.2 that accepts every
// delivery, or redirects it when redirect is set.
func allowedReceiver(t *testing.T, redirect string) (url string, got *atomic.Int64) {
	t.Helper()
	got = &atomic.Int64{}
	if redirect != "" {
		return redirector(t, redirect), got
	}
	l, err := net.Listen("tcp", allowedAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, got
}

func callbackFinal(r *arv1.AgentRun) bool {
	cb := r.Status.Callback
	return cb != nil && cb.State != arv1.CallbackPending
}

// TestEgressRefusesCallbackURLs: a spec.callback.url naming the metadata
// address, the API server's address or a loopback address is refused at
// admission with the CRD's exact message; a name resolving to one of them
// gets past admission and is refused when connecting: the run completes,
// status.callback says Failed after one attempt with the exact refusal and
// its remedy, and the listeners saw nothing. A receiver that redirects to a
// refused address fails the same way; an allowed receiver is delivered.
func TestEgressRefusesCallbackURLs(t *testing.T) {
	f := startEgressManager(t, manager.Options{})
	ns := newNamespace(t)
	createConfigMap(t, ns, "one", map[string]string{"agent.toml": stages(1)})
	createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})

	for i, literal := range []string{"http://169.254.169.254/latest/meta-data/", "https://" + f.apiHost + "/api", f.apiAddr.URL() + "/hook", f.loopback.URL() + "/hook"} {
		run := &arv1.AgentRun{Spec: arv1.AgentRunSpec{Agent: "one", Task: "t", Callback: &arv1.CallbackSpec{URL: literal}}}
		run.Name, run.Namespace = fmt.Sprintf("literal-%d", i), ns
		err := k8s.Create(t.Context(), run)
		if err == nil || !strings.Contains(err.Error(), "spec.callback.url") || !strings.Contains(err.Error(), msgCallbackAddress) {
			t.Errorf("callback %s: create error %v, want the CRD's refusal %q", literal, err, msgCallbackAddress)
		}
	}

	// Receivers on 127.0.0.2 are called as allowed.test: the CRD refuses
	// every loopback literal, allowed or not.
	hook, delivered := allowedReceiver(t, "")
	bounce, _ := allowedReceiver(t, f.loopback.URL())
	hook, bounce = strings.Replace(hook, allowedAddr, "allowed.test", 1), strings.Replace(bounce, allowedAddr, "allowed.test", 1)
	cases := []egressCase{
		{name: "name-to-metadata", base: "http://metadata.test", host: "metadata.test", addr: "169.254.169.254", reason: reasonMetadata, rule: egress.RuleMetadata, remedy: "refused on purpose"},
		{name: "name-to-apiserver", base: "https://apiserver.test:" + strings.Split(f.apiHost, ":")[1], host: "apiserver.test", addr: "127.0.0.1", reason: reasonAPIServer, rule: egress.RuleAPIServer, remedy: "point the URL elsewhere"},
		{name: "name-to-apiserver-address", base: "http://apiserver.test:" + f.apiAddr.port(), host: "apiserver.test", addr: "127.0.0.1", reason: reasonAPIServer, rule: egress.RuleAPIServer, remedy: "point the URL elsewhere"},
		{name: "name-to-loopback", base: "http://recorder.test:" + f.loopback.port(), host: "recorder.test", addr: recorderAddr, reason: reasonLoopback, rule: egress.RuleLoopback, remedy: "--egress-allow-cidr=127.0.0.0/8"},
		{name: "redirect", base: bounce, host: recorderAddr, reason: reasonLoopback, rule: egress.RuleLoopback, remedy: "--egress-allow-cidr=127.0.0.0/8"},
		{name: "allowed", base: hook},
	}
	for _, c := range cases {
		createRun(t, ns, c.name, "one", func(r *arv1.AgentRun) { r.Spec.Callback = &arv1.CallbackSpec{URL: c.base + "/hook"} })
	}
	for _, c := range cases {
		run := waitFor(t, ns, c.name, 30*time.Second, "callback settled", callbackFinal)
		cb := run.Status.Callback
		if c.rule == "" {
			if cb.State != arv1.CallbackDelivered {
				t.Errorf("%s: callback %+v, want Delivered", c.name, cb)
			}
			continue
		}
		if run.Status.Phase != arv1.PhaseComplete || cb.State != arv1.CallbackFailed || cb.Attempts != 1 ||
			!strings.Contains(cb.LastError, c.want(ns)) || !strings.Contains(cb.LastError, c.remedy) || !strings.Contains(cb.LastError, "(not retried)") {
			t.Errorf("%s: phase %s callback %+v, want Complete with the delivery Failed after 1 attempt: %q", c.name, run.Status.Phase, cb, c.want(ns))
		}
	}
	if delivered.Load() != 1 {
		t.Errorf("the allowed receiver got %d deliveries, want 1", delivered.Load())
	}
	f.apiAddr.sawNothing(t, "callback")
	f.loopback.sawNothing(t, "callback")
}

// policiesApplied counts the policies the suite's managers have put in
// force (each logs one line when it does).
func policiesApplied() int { return strings.Count(logSink.String(), "Egress policy in force") }

// awaitPolicy waits for the watch to apply an edit: one more policy in
// force than before.
func awaitPolicy(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for policiesApplied() <= before {
		if time.Now().After(deadline) {
			t.Fatal("the egress ConfigMap's change was not applied within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEgressConfigMapEditsApplyPerNamespace: the admin's egress ConfigMap
// is watched. A namespace exception added to it lets that namespace's next
// delivery reach 127.0.0.4 while another namespace stays refused; an edit
// that does not parse keeps the policy in force and says so in an Event on
// the ConfigMap; deleting the ConfigMap returns to the flags alone.
func TestEgressConfigMapEditsApplyPerNamespace(t *testing.T) {
	admin := newNamespace(t)
	startEgressManager(t, manager.Options{EgressConfigMap: keyOf(admin, egress.DefaultConfigMapName)})
	tenant, other := newNamespace(t), newNamespace(t)
	l, err := net.Listen("tcp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	hook := strings.Replace(srv.URL, "127.0.0.4", "allowed4.test", 1) + "/hook"
	for _, ns := range []string{tenant, other} {
		createConfigMap(t, ns, "one", map[string]string{"agent.toml": stages(1)})
		createConfigMap(t, ns, "agentrun-providers", map[string]string{"providers.toml": scriptedProviders})
	}
	deliver := func(ns, name string) *arv1.CallbackStatus {
		t.Helper()
		createRun(t, ns, name, "one", func(r *arv1.AgentRun) { r.Spec.Callback = &arv1.CallbackSpec{URL: hook} })
		return waitFor(t, ns, name, 30*time.Second, "callback settled", callbackFinal).Status.Callback
	}
	refused := refusalText("allowed4.test", "127.0.0.4", tenant, reasonLoopback, egress.RuleLoopback)
	if cb := deliver(tenant, "before"); cb.State != arv1.CallbackFailed || !strings.Contains(cb.LastError, refused) {
		t.Fatalf("before the ConfigMap: %+v, want Failed: %s", cb, refused)
	}

	applied := policiesApplied()
	cm := createConfigMap(t, admin, egress.DefaultConfigMapName, map[string]string{egress.DataKey: fmt.Sprintf("[namespaces.%s]\nallow_cidrs = [\"127.0.0.4/32\"]\n", tenant)})
	awaitPolicy(t, applied)
	if cb := deliver(tenant, "excepted"); cb.State != arv1.CallbackDelivered {
		t.Errorf("with the namespace exception: %+v, want Delivered", cb)
	}
	if cb := deliver(other, "not-excepted"); cb.State != arv1.CallbackFailed || !strings.Contains(cb.LastError, egress.RuleLoopback) {
		t.Errorf("another namespace: %+v, want Failed (rule loopback): the exception is the tenant's only", cb)
	}

	setConfigMapData(t, admin, cm.Name, map[string]string{egress.DataKey: "allow_cidrs = [\"not a cidr\"]\n"})
	waitForEvent(t, admin, cm.Name, "EgressConfigInvalid", "previous egress policy stays in force")
	if cb := deliver(tenant, "after-bad-edit"); cb.State != arv1.CallbackDelivered {
		t.Errorf("after an edit that does not parse: %+v, want Delivered under the policy in force", cb)
	}

	applied = policiesApplied()
	if err := k8s.Delete(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	awaitPolicy(t, applied)
	if cb := deliver(tenant, "after-delete"); cb.State != arv1.CallbackFailed {
		t.Errorf("after the ConfigMap is deleted: %+v, want Failed under the flags alone", cb)
	}
	if got.Load() != 2 {
		t.Errorf("the receiver got %d deliveries, want 2 (the excepted ones)", got.Load())
	}
}

// TestEgressConfigMapThatDoesNotParseStopsTheStart: a manager must not
// start with less than the admin's policy, so an egress ConfigMap that
// does not parse at start is an error naming it and the line.
func TestEgressConfigMapThatDoesNotParseStopsTheStart(t *testing.T) {
	admin := newNamespace(t)
	createConfigMap(t, admin, egress.DefaultConfigMapName, map[string]string{egress.DataKey: "deny_cidrs = [\"10.0.0.1/8\"]\n"})
	_, err := manager.New(env.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
		EgressConfigMap: keyOf(admin, egress.DefaultConfigMapName),
	})
	want := fmt.Sprintf("egress ConfigMap %s/%s: egress.toml line 1", admin, egress.DefaultConfigMapName)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "host bits set") {
		t.Fatalf("manager.New error %v, want one containing %q and the problem", err, want)
	}
}
