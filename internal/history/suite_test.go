package history_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// The suite: a real kube-apiserver with the aggregation layer on, a real
// PostgreSQL, and the history server on loopback behind the APIService,
// authenticating as its own ServiceAccount with the RBAC of config/history.
var (
	env   *testenv.Env
	pg    *postgres.Server
	arch  *sqlstore.Store
	clk   *clocktesting.FakeClock
	dir   string
	port  int
	admin string // kubeconfig of a cluster admin (system:masters)
	// serverKubeconfig authenticates as ServiceAccount agentrun-history.
	serverKubeconfig string
)

// serveEnv set makes the test binary run the history server (its
// arguments are the server's flags).
const serveEnv = "AGENTRUN_HISTORY_TEST_SERVE"

const systemNS = testenv.SystemNamespace

func TestMain(m *testing.M) {
	// The benchmark runs the history server as a process of its own (this
	// binary again), so its memory is measured alone.
	if os.Getenv(serveEnv) != "" {
		os.Exit(history.Main(os.Args[1:], os.Stderr))
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if pg, err = postgres.Start(postgres.Options{}); err != nil {
		return 0, err
	}
	defer func() { _ = pg.Stop() }()
	if env, err = testenv.StartWith(testenv.Options{Aggregation: true}); err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	if dir, err = os.MkdirTemp("", "history-test-"); err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if admin, err = env.Kubeconfig(dir); err != nil {
		return 0, err
	}
	db, err := pg.CreateDatabase(context.Background())
	if err != nil {
		return 0, err
	}
	if arch, err = sqlstore.Open(sqlstore.Config{DSN: db.DSN}); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := install(ctx); err != nil {
		return 0, err
	}
	clk = clocktesting.NewFakeClock(time.Now())
	if err := startServer(ctx, db.DSN); err != nil {
		return 0, err
	}
	if err := waitAvailable(ctx); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// install applies config/history (the roles, the server's RBAC, Service,
// Deployment, APIService) and points the Service at the server on
// loopback: an ExternalName the aggregator resolves to its host.
func install(ctx context.Context) error {
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := env.ApplyDir(filepath.Join(testenv.RepoRoot(), "config", "history")); err != nil {
		return err
	}
	svc, err := kube.CoreV1().Services(systemNS).Get(ctx, "agentrun-history", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := kube.CoreV1().Services(systemNS).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	_, err = kube.CoreV1().Services(systemNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "agentrun-history", Namespace: systemNS},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}, metav1.CreateOptions{})
	return err
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// startServer runs the history server in this process on a loopback
// port, as ServiceAccount agentrun-history, and points the APIService at
// that port.
func startServer(ctx context.Context, dsn string) error {
	kube := kubernetes.NewForConfigOrDie(env.Config)
	tok, err := kube.CoreV1().ServiceAccounts(systemNS).CreateToken(ctx, "agentrun-history",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	kc, err := writeKubeconfig("history-server", &clientcmdapi.AuthInfo{Token: tok.Status.Token})
	if err != nil {
		return err
	}
	ln, p, err := history.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	port, serverKubeconfig = p, kc
	patch := fmt.Appendf(nil, `{"spec":{"service":{"port":%d}}}`, port)
	if _, err := dynamic.NewForConfigOrDie(env.Config).Resource(apiServices).Patch(ctx, history.APIServiceName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	o := history.NewOptions()
	o.SecureServing.Listener, o.SecureServing.BindPort = ln, port
	o.Authentication.RemoteKubeConfigFile = kc
	o.Authorization.RemoteKubeConfigFile = kc
	o.Store = dsn
	o.Certs = history.CertOptions{Namespace: systemNS, SecretName: "agentrun-history-cert", Service: "agentrun-history", Kubeconfig: kc}
	o.Clock = clk
	o.Watch.Interval = 100 * time.Millisecond
	s, err := o.New(ctx)
	if err != nil {
		return fmt.Errorf("starting the history server: %w", err)
	}
	go func() { _ = s.Run(ctx) }()
	return nil
}

// waitAvailable waits for the API server to find the history server
// available (its discovery answered through the APIService, with the
// caBundle the server wrote).
func waitAvailable(ctx context.Context) error {
	dyn := dynamic.NewForConfigOrDie(env.Config)
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		u, err := dyn.Resource(apiServices).Get(ctx, history.APIServiceName, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructuredSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return nil
					}
					last = fmt.Sprint(m["reason"], ": ", m["message"])
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the APIService did not become available: %s", last)
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// writeKubeconfig writes a kubeconfig for the test API server with auth.
func writeKubeconfig(name string, auth *clientcmdapi.AuthInfo) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos[name] = auth
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(dir, "kubeconfig-"+name)
	return path, clientcmd.WriteToFile(*cfg, path)
}

// userConfig makes a user (client certificate) and returns its kubeconfig
// path and rest.Config.
func userConfig(t *testing.T, name string, groups ...string) (string, *rest.Config) {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig-"+name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, u.Config()
}

// bind grants user the ClusterRole in namespace ns.
func bind(t *testing.T, ns, user, clusterRole string) {
	t.Helper()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// runSpec describes an archived run to make.
type runSpec struct {
	ns, name, agent string
	phase           arv1.Phase
	labels          map[string]string
	// calls: each call's tokens and cost (nil: unpriced).
	calls    []*int64
	model    string
	output   *string
	children []store.ChildRecord
	finished time.Time
}

var uidSeq int

// archiveRun archives a finished run with its journal (and so its ledger
// rows), as the manager's archive does, and returns the run as its CR
// showed it.
func archiveRun(t testing.TB, s runSpec) *arv1.AgentRun {
	t.Helper()
	uidSeq++
	if s.model == "" {
		s.model = "gpt-test"
	}
	if s.finished.IsZero() {
		s.finished = clk.Now().Add(-time.Duration(uidSeq) * time.Second)
	}
	run := &arv1.AgentRun{
		TypeMeta: metav1.TypeMeta{APIVersion: arv1.GroupVersion.String(), Kind: "AgentRun"},
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.name, UID: types.UID(fmt.Sprintf("uid-%s-%06d", s.name, uidSeq)),
			Labels: s.labels, CreationTimestamp: metav1.NewTime(s.finished.Add(-time.Minute).Truncate(time.Second))},
		Spec: arv1.AgentRunSpec{Agent: s.agent},
	}
	var entries []journal.Entry
	var priced, unpriced, tokens int64
	for i, cost := range s.calls {
		at := s.finished.Add(-time.Duration(len(s.calls)-i) * time.Second)
		entries = append(entries,
			journal.Entry{Seq: int64(2 * i), Kind: journal.ModelCallRequested, At: at, Stage: "work", Iteration: i, Provider: "test", Model: s.model},
			journal.Entry{Seq: int64(2*i + 1), Kind: journal.ModelCallCompleted, At: at, Call: int64(2 * i), Provider: "test", Model: s.model,
				Usage: &journal.Usage{Prompt: 100, Completion: 20}, CostNanoUSD: cost, Response: &journal.Response{Text: "answer " + strconv.Itoa(i)}})
		tokens += 120
		if cost == nil {
			unpriced++
		} else {
			priced += *cost
		}
	}
	st := &run.Status
	st.Phase, st.Model = s.phase, s.model
	st.StartedAt = ptr.To(metav1.NewTime(run.CreationTimestamp.Add(time.Second)))
	st.FinishedAt = ptr.To(metav1.NewTime(s.finished.Truncate(time.Second)))
	st.Usage = arv1.Usage{PromptTokens: 100 * int64(len(s.calls)), CompletionTokens: 20 * int64(len(s.calls)), TotalTokens: tokens,
		ModelCalls: int64(len(s.calls)), UnpricedCalls: unpriced, CostPricedUSD: nanoString(priced), CostUSD: nanoString(priced)}
	if unpriced > 0 {
		st.Usage.CostUSD = "unknown"
	}
	if entries == nil {
		entries = []journal.Entry{}
	}
	if err := arch.Archive(context.Background(), &store.Record{Run: run, Output: s.output, Entries: entries, Children: s.children}); err != nil {
		t.Fatal(err)
	}
	return run
}
