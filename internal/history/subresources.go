package history

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// transcriptREST serves agentrunrecords/NAME/transcript: the run's
// journal in the words of `kubectl agentrun transcript`.
type transcriptREST struct{ records *recordsREST }

// outputREST serves agentrunrecords/NAME/output: the final output.
type outputREST struct{ records *recordsREST }

var (
	_ rest.Getter = (*transcriptREST)(nil)
	_ rest.Getter = (*outputREST)(nil)
)

func (*transcriptREST) New() runtime.Object { return &hv1.AgentRunTranscript{} }
func (*transcriptREST) Destroy()            {}
func (*outputREST) New() runtime.Object     { return &hv1.AgentRunOutput{} }
func (*outputREST) Destroy()                {}

// journalOf is the journal the subresources read for a name: that of the
// run still in the cluster when its journal is in the database and not
// archived yet (so the plugin and the console read such journals through
// the API server, as they read ConfigMaps), else the newest record's.
type journalOf struct {
	uid  string
	live bool
}

func (r *recordsREST) journalOf(ctx context.Context, name string) (journalOf, error) {
	ns := genericapirequest.NamespaceValue(ctx)
	uid, live, err := r.store.LiveJournal(ctx, ns, name)
	if err != nil {
		return journalOf{}, storeError(err)
	}
	if live {
		return journalOf{uid: uid, live: true}, nil
	}
	row, err := r.find(ctx, name, "")
	if err != nil {
		return journalOf{}, err
	}
	return journalOf{uid: row.UID}, nil
}

func subMeta(ctx context.Context, name string, j journalOf) metav1.ObjectMeta {
	source := hv1.SourceArchive
	if j.live {
		source = hv1.SourceJournal
	}
	return metav1.ObjectMeta{Name: name, Namespace: genericapirequest.NamespaceValue(ctx), UID: types.UID(j.uid),
		Annotations: map[string]string{hv1.SourceAnnotation: source}}
}

// Get renders the journal.
func (t *transcriptREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	j, err := t.records.journalOf(ctx, name)
	if err != nil {
		return nil, err
	}
	entries, err := t.records.store.RecordJournal(ctx, genericapirequest.NamespaceValue(ctx), name, j.uid)
	if err != nil {
		return nil, storeError(err)
	}
	out := &hv1.AgentRunTranscript{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunTranscript"},
		ObjectMeta: subMeta(ctx, name, j),
	}
	for _, l := range transcript.Lines(entries) {
		out.Lines = append(out.Lines, hv1.TranscriptLine(l))
	}
	return out, nil
}

// Get reads the output.
func (o *outputREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	j, err := o.records.journalOf(ctx, name)
	if err != nil {
		return nil, err
	}
	var text string
	var ok bool
	if j.live {
		text, ok, err = o.records.store.Output(ctx, store.RunRef{Namespace: genericapirequest.NamespaceValue(ctx), Name: name, UID: types.UID(j.uid)})
	} else {
		text, ok, err = o.records.store.RecordOutput(ctx, j.uid)
	}
	if err != nil {
		return nil, storeError(err)
	}
	return &hv1.AgentRunOutput{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunOutput"},
		ObjectMeta: subMeta(ctx, name, j),
		Stored:     ok,
		Output:     text,
	}, nil
}
