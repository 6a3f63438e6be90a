package history

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
)

// journalREST serves agentrunrecords/NAME/journal: the journal's entries
// as stored, for the readers that work on entries (the plugin's describe,
// regions, fork --from-entry, transcript --follow, approve --args --wait),
// so that they read a database journal as they read ConfigMaps, as the
// same user and without database credentials. It finds the journal as
// transcript does (journalOf) and is authorized alike: get on the
// subresource, which the viewer role grants.
type journalREST struct{ records *recordsREST }

var _ rest.Getter = (*journalREST)(nil)

func (*journalREST) New() runtime.Object { return &hv1.AgentRunJournal{} }
func (*journalREST) Destroy()            {}

// Get reads the journal's entries.
func (j *journalREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	of, err := j.records.journalOf(ctx, name)
	if err != nil {
		return nil, err
	}
	entries, err := j.records.store.RecordJournal(ctx, genericapirequest.NamespaceValue(ctx), name, of.uid)
	if err != nil {
		return nil, storeError(err)
	}
	out := &hv1.AgentRunJournal{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunJournal"},
		ObjectMeta: subMeta(ctx, name, of),
		Entries:    make([]runtime.RawExtension, 0, len(entries)),
	}
	for i := range entries {
		raw, err := json.Marshal(&entries[i])
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("journal entry %d of %s does not encode: %w", entries[i].Seq, name, err))
		}
		out.Entries = append(out.Entries, runtime.RawExtension{Raw: raw})
	}
	return out, nil
}
