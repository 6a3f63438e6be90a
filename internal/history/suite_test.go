package history_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historytest"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// The suite: a real kube-apiserver with the aggregation layer on, a real
// PostgreSQL, and the history server on loopback behind the APIService,
// authenticating as its own ServiceAccount with the RBAC of config/history.
var (
	env  *testenv.Env
	pg   *postgres.Server
	arch *sqlstore.Store
	// archiver archives runs into arch (archiveRun).
	archiver *historytest.Archiver
	clk      *clocktesting.FakeClock
	dir      string
	port     int
	admin    string // kubeconfig of a cluster admin (system:masters)
	// serverKubeconfig authenticates as ServiceAccount agentrun-history.
	serverKubeconfig string
)

// serveEnv set makes the test binary run the history server (its
// arguments are the server's flags).
const serveEnv = "AGENTRUN_HISTORY_TEST_SERVE"

const systemNS = historytest.Namespace

func TestMain(m *testing.M) {
	// The benchmark runs the history server as a process of its own (this
	// binary again), so its memory is measured alone.
	if os.Getenv(serveEnv) != "" {
		os.Exit(serve())
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

// serve runs the history server; with HISTORY_CPUPROFILE=FILE (the
// benchmark passes it on) it writes the server's CPU profile there when
// it stops.
func serve() int {
	if path := os.Getenv("HISTORY_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// Written on SIGTERM (the benchmark's stop), before the server's
		// own shutdown, which may not finish before the process is killed.
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	return history.Main(os.Args[1:], os.Stderr)
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
	clk = clocktesting.NewFakeClock(time.Now())
	archiver = &historytest.Archiver{Store: arch, Clock: clk}
	srv, err := historytest.Start(ctx, env, historytest.Options{DSN: db.DSN, Dir: dir, Clock: clk, WatchInterval: 100 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	port, serverKubeconfig = srv.Port, srv.Kubeconfig
	return m.Run(), nil
}

// apiServices is the APIService resource (the benchmark points it at a
// server process of its own).
var apiServices = historytest.APIServices

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

// archiveRun archives a finished run with its journal (and so its ledger
// rows), as the manager's archive does, and returns the run as its CR
// showed it.
func archiveRun(t testing.TB, s runSpec) *arv1.AgentRun {
	t.Helper()
	run, err := archiver.Archive(context.Background(), historytest.Run{Namespace: s.ns, Name: s.name, Agent: s.agent, Phase: s.phase,
		Labels: s.labels, Calls: s.calls, Model: s.model, Output: s.output, Children: s.children, Finished: s.finished})
	if err != nil {
		t.Fatal(err)
	}
	return run
}
