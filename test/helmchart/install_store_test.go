package helmchart_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	// The pgx driver, for reading what the manager stored.
	_ "github.com/jackc/pgx/v5/stdlib"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/manager"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv/postgres"
)

// TestChartStoreKeepsRunsInPostgresOverTLS installs the chart with a
// database store (release agentrun-store, watching store-a) on a real API
// server with the real kubectl, against a real PostgreSQL serving TLS: the
// DSN holds no password, the password is a Secret's key and the CA another
// Secret's. The manager binary runs with the Deployment's arguments,
// environment and Secret volume, filled in as a kubelet would. First the
// CA Secret holds a CA that did not sign the server's certificate: the
// manager starts but is not ready, and the run waits on StoreUnavailable
// with a remedy naming the CA Secret, and no password anywhere. With the
// right CA in the Secret and the manager restarted, the run completes by
// itself; its journal and its archived record are in the database (status
// says Database and Archived), its connections are TLS, and no journal
// ConfigMap was written.
func TestChartStoreKeepsRunsInPostgresOverTLS(t *testing.T) {
	const rel, ns, watched = "agentrun-store", "agentrun-store", "store-a"
	pg, db := postgres.ForTest(t, postgres.Options{TLS: true})
	e := controlPlane(t)
	admin, err := e.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := testenv.Kubectl(admin, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return out
	}
	kubectl("create", "namespace", ns)
	kubectl("create", "namespace", watched)
	secrets := t.TempDir()
	file := func(name string, data []byte) string {
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kubectl("create", "secret", "generic", "agentrun-db", "-n", ns, "--from-file=password="+file("password", []byte(db.Password)))
	// A CA, but not the one that signed the database's certificate.
	kubectl("create", "secret", "generic", "agentrun-db-ca", "-n", ns, "--from-file=ca.crt="+file("other-ca.crt", e.Config.CAData))

	dsn := fmt.Sprintf("postgres://%s@%s:%d/%s", db.Role, pg.Host, pg.Port, db.Name)
	r := renderRelease(t, rel, ns, mustYAML(t, fmt.Sprintf(`{watchNamespaces: [%s], admissionPolicy: {enabled: false}, webhook: {enabled: false},
store: {dsn: %q, existingSecret: agentrun-db, caSecret: agentrun-db-ca}}`, watched, dsn)))
	manifest := filepath.Join(t.TempDir(), "chart.yaml")
	writeYAML(t, manifest, append(r.crds, r.objs...))
	kubectl("apply", "--server-side", "-f", manifest)
	d := one[appsv1.Deployment](t, r.objs, "Deployment", "")
	saKubeconfig := serviceAccountKubeconfig(t, e, kubectl("create", "token", d.Spec.Template.Spec.ServiceAccountName, "-n", ns, "--duration=1h"))
	c, err := client.New(e.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	kl := newKubelet(t, admin)
	mgr := launchManager(t, d, saKubeconfig, kl)
	applyDemoRun(t, admin, watched)
	parked := waitRun(t, c, watched, "review-pr", 60*time.Second, "waiting on its store", func(r *arv1.AgentRun) bool {
		return r.Status.WaitingOn != nil && r.Status.WaitingOn.Reason == arv1.WaitStoreUnavailable
	})
	t.Logf("the run waited on its store %s after the manager started", time.Since(start).Round(time.Millisecond))
	w := parked.Status.WaitingOn
	if !strings.Contains(w.Remedy, "CA Secret") || w.StoreError == "" || !w.NeedsAPerson {
		t.Errorf("the run waits with remedy %q, storeError %q, needsAPerson %v; want the CA Secret named, the cause, and a person", w.Remedy, w.StoreError, w.NeedsAPerson)
	}
	if code, _ := get("http://" + mgr.probes + mgr.readyPath); code == 200 {
		t.Errorf("the manager is ready though its database's certificate does not verify")
	}
	mgr.stop(t)

	// The right CA in the Secret, and the pods restarted.
	kubectl("delete", "secret", "agentrun-db-ca", "-n", ns)
	kubectl("create", "secret", "generic", "agentrun-db-ca", "-n", ns, "--from-file=ca.crt="+pg.CAFile)
	start = time.Now()
	mgr2 := launchManager(t, d, saKubeconfig, kl)
	mgr2.waitReady(t)
	t.Logf("the restarted manager was ready in %s", time.Since(start).Round(time.Millisecond))
	done := waitRun(t, c, watched, "review-pr", 60*time.Second, "Complete and archived", func(r *arv1.AgentRun) bool {
		return r.Status.Phase == arv1.PhaseComplete && meta.IsStatusConditionTrue(r.Status.Conditions, arv1.ConditionArchived)
	})
	t.Logf("the run completed %s after the restart", time.Since(start).Round(time.Millisecond))
	if done.Status.JournalStore != arv1.JournalDatabase {
		t.Errorf("status.journalStore %q, want Database", done.Status.JournalStore)
	}
	checkStored(t, pg, db, string(done.UID))
	if out := kubectl("get", "configmaps", "-n", watched, "-l", "agentrun.dev/component=journal", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("journal ConfigMaps were written though a database is configured:\n%s", out)
	}
	mgr2.stop(t)
	for _, m := range []*managerProcess{mgr, mgr2} {
		if strings.Contains(m.log.String(), db.Password) {
			t.Error("the manager logged the database password")
		}
	}
	if strings.Contains(w.StoreError+w.Remedy, db.Password) {
		t.Error("the run's status shows the database password")
	}
}

// checkStored: the run's journal and its archived record are in the
// database, and every connection of the manager's role is TLS.
func checkStored(t *testing.T, pg *postgres.Server, db *postgres.Database, uid string) {
	t.Helper()
	conn, err := sql.Open("pgx", pg.SuperuserDSN(db.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var entries, archived int
	if err := conn.QueryRow("SELECT count(*) FROM journal_entries WHERE run_uid = $1", uid).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow("SELECT count(*) FROM archived_runs WHERE run_uid = $1", uid).Scan(&archived); err != nil {
		t.Fatal(err)
	}
	if entries == 0 || archived != 1 {
		t.Errorf("the database holds %d journal entries and %d archived records of the run; want some, and one", entries, archived)
	}
	// The running manager keeps connections open in its pool.
	var conns int
	var allTLS sql.NullBool
	if err := conn.QueryRow(`SELECT count(*), bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = $1`, db.Role).Scan(&conns, &allTLS); err != nil {
		t.Fatal(err)
	}
	if conns == 0 || !allTLS.Bool {
		t.Errorf("the manager has %d connections open, TLS: %v; want some, all TLS", conns, allTLS.Bool)
	}
}
