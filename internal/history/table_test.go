package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// kubectlTable is the Accept header kubectl get sends.
const kubectlTable = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

// TestTablesReadSummariesAndWholeRecordsStayWhole: a list asked for as
// kubectl asks (a Table, rows carrying metadata) prints from the records'
// summaries exactly what it printed from whole records, with each row's
// whole metadata; a record archived before summaries existed prints the
// same from its whole record; a plain list, -o yaml and a Table with
// includeObject=Object still give whole records (spec, children).
func TestTablesReadSummariesAndWholeRecordsStayWhole(t *testing.T) {
	ctx := context.Background()
	ns := "tables"
	finished := clk.Now().Add(-90 * time.Minute).Truncate(time.Second)
	for i, name := range []string{"summarised", "legacy", "unpriced"} {
		run := &arv1.AgentRun{
			TypeMeta: metav1.TypeMeta{APIVersion: arv1.GroupVersion.String(), Kind: "AgentRun"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-table-" + name), Generation: 2,
				Labels:            map[string]string{"team": "x", "n": fmt.Sprint(i)},
				Annotations:       map[string]string{"note": "kept in the metadata"},
				CreationTimestamp: metav1.NewTime(finished.Add(-10 * time.Minute)), Finalizers: []string{"agentrun.dev/archive"}},
			Spec: arv1.AgentRunSpec{Agent: "researcher", Task: strings.Repeat("a long task ", 50)},
			Status: arv1.AgentRunStatus{Phase: arv1.PhaseComplete, Model: "m-" + name, StartedAt: ptr.To(metav1.NewTime(finished.Add(-3 * time.Minute))),
				FinishedAt: ptr.To(metav1.NewTime(finished.Add(-time.Duration(i) * time.Second))),
				Usage:      arv1.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, ModelCalls: 2, CostUSD: "0.0015", CostPricedUSD: "0.0015"}},
		}
		if name == "unpriced" {
			run.Status.Phase = arv1.PhaseError
			run.Status.Usage.CostUSD, run.Status.Usage.UnpricedCalls = "unknown", 1
		}
		if err := arch.Archive(ctx, &store.Record{Run: run, Children: []store.ChildRecord{{Name: name + "-child", UID: "c", Phase: arv1.PhaseComplete}}}); err != nil {
			t.Fatal(err)
		}
	}
	// As a record archived before schema version 8 is.
	if _, err := arch.DB().ExecContext(ctx, "UPDATE archived_runs SET summary = NULL WHERE run_uid = 'uid-table-legacy'"); err != nil {
		t.Fatal(err)
	}

	c, err := historyclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := c.ListRecords(ctx, ns, metav1.ListOptions{})
	if err != nil || len(whole.Items) != 3 {
		t.Fatalf("plain list: %v, %v", whole, err)
	}
	for _, rec := range whole.Items {
		if !strings.HasPrefix(rec.Spec.Task, "a long task") || len(rec.Archive.Children) != 1 || rec.Status.FinishedAt == nil {
			t.Fatalf("a plain list's record is not whole: %+v", rec)
		}
	}

	raw := kubernetes.NewForConfigOrDie(env.Config).CoreV1().RESTClient()
	table := func(includeObject string) *metav1.Table {
		t.Helper()
		req := raw.Get().AbsPath("/apis/history.agentrun.dev/v1alpha1/namespaces/"+ns+"/agentrunrecords").SetHeader("Accept", kubectlTable)
		if includeObject != "" {
			req = req.Param("includeObject", includeObject)
		}
		body, err := req.Do(ctx).Raw()
		if err != nil {
			t.Fatal(err)
		}
		var tbl metav1.Table
		if err := json.Unmarshal(body, &tbl); err != nil {
			t.Fatal(err)
		}
		if len(tbl.Rows) != len(whole.Items) {
			t.Fatalf("%d rows, want %d", len(tbl.Rows), len(whole.Items))
		}
		return &tbl
	}
	// The Table reads summaries, not records: a record that no longer
	// decodes does not change its row.
	setRecord := func(doc string) {
		t.Helper()
		if _, err := arch.DB().ExecContext(ctx, "UPDATE archived_runs SET record = $1 WHERE run_uid = 'uid-table-summarised'", doc); err != nil {
			t.Fatal(err)
		}
	}
	var doc string
	if err := arch.DB().QueryRowContext(ctx, "SELECT record FROM archived_runs WHERE run_uid = 'uid-table-summarised'").Scan(&doc); err != nil {
		t.Fatal(err)
	}
	setRecord("not the record")
	now := clk.Now()
	tbl := table("")
	setRecord(doc)
	for i, row := range tbl.Rows {
		rec := &whole.Items[i]
		want := historyclient.RowOf(rec, now)
		wantCells := []any{want.Name, want.Agent, want.Phase, float64(want.Tokens), want.Cost, want.Duration, want.Finished, want.Model, float64(want.Calls), want.UID}
		if !reflect.DeepEqual(row.Cells, wantCells) {
			t.Errorf("row %d: cells %v, want (from the whole record) %v", i, row.Cells, wantCells)
		}
		var meta metav1.PartialObjectMetadata
		if err := json.Unmarshal(row.Object.Raw, &meta); err != nil {
			t.Fatal(err)
		}
		wantMeta := rec.ObjectMeta
		if !reflect.DeepEqual(meta.ObjectMeta, wantMeta) {
			t.Errorf("row %d: metadata %+v, want %+v", i, meta.ObjectMeta, wantMeta)
		}
	}
	if got := fmt.Sprint(tbl.Rows[2].Cells[4]); !strings.HasPrefix(got, "unknown") {
		t.Errorf("an unpriced run's cost cell: %q", got)
	}
	for _, row := range table("Object").Rows {
		var rec hv1.AgentRunRecord
		if err := json.Unmarshal(row.Object.Raw, &rec); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(rec.Spec.Task, "a long task") || len(rec.Archive.Children) != 1 {
			t.Errorf("includeObject=Object: the row's record is not whole: %+v", rec)
		}
	}
	yaml := mustKubectl(t, admin, "get", "agentrunrecords", "-n", ns, "-o", "yaml")
	if n := strings.Count(yaml, "task: 'a long task a long task"); n != 3 {
		t.Errorf("-o yaml shows %d whole tasks, want 3:\n%s", n, yaml)
	}
	printed := mustKubectl(t, admin, "get", "agentrunrecords", "-n", ns, "-o", "wide")
	for _, want := range []string{"summarised", "legacy", "m-unpriced", "unknown (≥$0.0015)"} {
		if !strings.Contains(printed, want) {
			t.Errorf("kubectl get -o wide does not show %q:\n%s", want, printed)
		}
	}
}
