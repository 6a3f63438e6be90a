package consolebrowser_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/console"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

var (
	env   *testenv.Env
	admin client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if !testing.Short() {
			var err error
			// The aggregation layer is on for the whole suite (it costs the
			// API server's start nothing measurable) so the history test
			// can serve the history API behind it without a control plane
			// of its own; the history server starts only when that test
			// runs (historyArchiver).
			if env, err = testenv.StartWith(testenv.Options{Aggregation: true}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer func() { _ = env.Stop() }()
			defer stopHistoryAPI()
			if admin, err = client.New(env.Config, client.Options{Scheme: manager.Scheme()}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if err := applyFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "answerer_role.yaml")); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// applyFile creates the objects of one YAML file (the people's roles).
func applyFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj rbacv1.ClusterRole
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if obj.Name == "" {
			continue
		}
		if err := admin.Create(context.Background(), &obj); err != nil {
			return err
		}
	}
}

// chromium is the browser the tests drive: $CHROMIUM, else the Debian
// package's. Without one the tests skip, except under CI (.ci/run
// installs it), where a missing browser fails them.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a control plane and a browser; skipped with -short")
	}
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Chromium at %s under CI (.ci/run installs the chromium package): %v", path, err)
		}
		t.Skipf("no Chromium at %s (apt-get install chromium, or set CHROMIUM): browser tests skipped", path)
	}
	return path
}

// browser starts a headless Chromium and returns a tab's context. A
// Chromium that exits before it serves DevTools ("chrome failed to
// start", seen once in a full test run on this machine, not again) is
// started again, up to three times.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelB := chromedp.NewContext(actx)
		ctx, cancelC := context.WithTimeout(ctx, 3*time.Minute)
		if err = chromedp.Do(ctx); err == nil {
			t.Cleanup(func() { cancelC(); cancelB(); cancelA() })
			return ctx
		}
		cancelC()
		cancelB()
		cancelA()
		t.Logf("starting Chromium (attempt %d): %v", attempt, err)
	}
	t.Fatalf("starting Chromium: %v", err)
	return nil
}

// serveConsole runs a console with o on loopback for the test, and
// returns its address.
func serveConsole(t *testing.T, o console.Options) (*console.Server, string) {
	t.Helper()
	s, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = console.Serve(ctx, l, s) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, l.Addr().String()
}

// startManager runs the operator's manager against the test API server,
// with the scripted model provider and loopback tool servers allowed.
func startManager(t *testing.T) {
	t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, Scripted: providers.NewScripted(),
		Egress:         egress.Config{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}},
		StatusInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "console-"}}
	if err := admin.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// userConfig is a client certificate config for user (no groups beyond
// system:authenticated).
func userConfig(t *testing.T, user string) *rest.Config {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u.Config()
}

// bind grants subject the cluster role in ns.
func bind(t *testing.T, ns, role string, subject rbacv1.Subject) {
	t.Helper()
	b := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: role + "-", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{subject}}
	if err := admin.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func userSubject(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: name}
}

// serviceAccountToken creates a ServiceAccount in ns and a token for it,
// as `kubectl create token` does.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// waitRun polls the run until cond holds, or fails at the deadline.
func waitRun(t *testing.T, ns, name, what string, cond func(*arv1.AgentRun) bool) *arv1.AgentRun {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var run arv1.AgentRun
		err := admin.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &run)
		if err == nil && cond(&run) {
			return &run
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: no %s within 60s (err %v, phase %s, waitingOn %+v)", ns, name, what, err, run.Status.Phase, run.Status.WaitingOn)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot writes a full-page screenshot to the test's output dir and,
// with CONSOLE_SCREENSHOTS=docs, to docs/images/console-NAME.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := screenshotDir()
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "console-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the %s: %s", name, path)
	if os.Getenv("CONSOLE_SCREENSHOTS") == "docs" {
		doc := filepath.Join(testenv.RepoRoot(), "docs", "images", "console-"+name+".png")
		if err := os.WriteFile(doc, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("kept in %s", doc)
	}
}

// screenshotDir is where screenshots are kept: $CONSOLE_SCREENSHOT_DIR,
// else $TEST_OUTPUT_DIR, else "" (a directory of the test's own).
func screenshotDir() string {
	return cmp.Or(os.Getenv("CONSOLE_SCREENSHOT_DIR"), os.Getenv("TEST_OUTPUT_DIR"))
}

// screenshotOnFailure takes a full-page screenshot of the tab when the
// test has failed, as it ends (before the browser closes), and keeps it
// past the test: in screenshotDir, else a directory of its own that the
// test's log names.
func screenshotOnFailure(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("no screenshot of the failure: %v", err)
			return
		}
		dir := screenshotDir()
		if dir == "" {
			if dir, err = os.MkdirTemp("", "console-screenshots-"); err != nil {
				t.Logf("no screenshot of the failure: %v", err)
				return
			}
		}
		path := filepath.Join(dir, "console-"+name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Logf("no screenshot of the failure: %v", err)
			return
		}
		t.Logf("screenshot of the page at the failure: %s", path)
	})
}

// toolAgent is a blueprint whose scripted model reads, then asks to make
// a write that needs approval, then completes.
const toolAgent = `[agent]
name = "tooling"
[agent.title]
enabled = false

[mcp_servers.tracker]
url = %q

[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
text = "turn 0"
tool_calls = [{name = "read_doc", arguments = '{"id":"a"}'}]
[[stages.work.script]]
text = "turn 1"
tool_calls = [{name = "create_ticket", arguments = '{"title":"ship it"}'}]
[[stages.work.script]]
complete = true
output = "ticket filed"
`

// quickAgent completes at once with its output.
const quickAgent = `[agent]
name = "quick"
[agent.title]
enabled = false

[stages.work]
allow_complete = true
[stages.work.model]
models = [{provider = "demo", model = "scripted-1"}]
[[stages.work.script]]
complete = true
output = "quick result"
`

const scriptedProviders = `
[providers.demo]
type = "scripted"
models = ["scripted-1"]
`

func createConfigMap(t *testing.T, ns, name, key, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{key: value}}
	if err := admin.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// createRun creates a run in a later second than the one created before
// it: creation timestamps have second resolution, and the tests check the
// newest-first order.
func createRun(t *testing.T, ns, name, agent string) {
	t.Helper()
	if d := time.Until(lastCreated.Add(time.Second)); d > 0 {
		time.Sleep(d)
	}
	run := &arv1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: arv1.AgentRunSpec{Agent: agent, Task: "console test: " + name}}
	if err := admin.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	lastCreated = run.CreationTimestamp.Time
}

// lastCreated is the creation time of the run createRun made last.
var lastCreated time.Time

func waitingOn(reason arv1.WaitReason) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool { return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == reason }
}

func phaseIs(p arv1.Phase) func(*arv1.AgentRun) bool {
	return func(r *arv1.AgentRun) bool { return r.Status.Phase == p }
}

// rowsInOrder are the run rows the list shows, top to bottom.
func rowsInOrder(ctx context.Context) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#runs tbody tr")).map(r => r.dataset.run)`))
}

func joined(rows []string) string { return strings.Join(rows, ", ") }

// openRun opens a run's page by its address, as a link to it does.
func openRun(ns, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[string](`location.hash = "#/run?namespace=`+ns+`&name=`+name+`"`)(ctx, tg)
		return err
	})
}

// pageReply is what the console answered a request made from its page.
type pageReply struct {
	Status int               `json:"status"`
	Body   map[string]string `json:"body"`
}

// postFromPage posts body to the console's path from the open page, as
// its own script does (same origin, its header), bypassing what the page
// offers: a request crafted by hand.
func postFromPage(ctx context.Context, path string, body map[string]any) (pageReply, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return pageReply{}, err
	}
	js := fmt.Sprintf(`fetch(%q, {method: "POST", headers: {"Content-Type": "application/json", "X-Agentrun-Console": "1"}, body: %q})
		.then(async r => ({status: r.status, body: await r.json()}))`, path, b)
	return chromedp.Run(ctx, chromedp.Evaluate[pageReply](js, chromedp.EvalAwaitPromise))
}
