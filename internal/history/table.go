package history

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/history/historyclient"
)

// The columns `kubectl get agentrunrecords` prints, computed by the
// server (kubectl asks for a Table).
var recordColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "The run's name."},
	{Name: "Agent", Type: "string", Description: "spec.agent."},
	{Name: "Phase", Type: "string", Description: "The final phase."},
	{Name: "Tokens", Type: "integer", Description: "status.usage.totalTokens."},
	{Name: "Cost", Type: "string", Description: "status.usage.costUSD: unknown when a call could not be priced (never 0)."},
	{Name: "Duration", Type: "string", Description: "From start (or creation) to finish."},
	{Name: "Finished", Type: "string", Description: "How long ago the run finished."},
	{Name: "Model", Type: "string", Priority: 1, Description: "The model of the last call."},
	{Name: "Calls", Type: "integer", Priority: 1, Description: "Model calls made."},
	{Name: "UID", Type: "string", Priority: 1, Description: "The run's uid (names may be reused)."},
}

// ConvertToTable prints records.
func (r *recordsREST) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: recordColumns}
	now := r.clock.Now()
	add := func(rec *hv1.AgentRunRecord) {
		row := historyclient.RowOf(rec, now)
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{row.Name, row.Agent, row.Phase, row.Tokens, row.Cost, row.Duration, row.Finished, row.Model, row.Calls, row.UID},
			Object: runtime.RawExtension{Object: rec},
		})
	}
	switch o := obj.(type) {
	case *hv1.AgentRunRecord:
		add(o)
	case *hv1.AgentRunRecordList:
		t.ResourceVersion, t.Continue = o.ResourceVersion, o.Continue
		for i := range o.Items {
			add(&o.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T as agentrunrecords", obj)
	}
	if l, err := meta.ListAccessor(obj); err == nil {
		t.RemainingItemCount = l.GetRemainingItemCount()
	}
	return t, nil
}
