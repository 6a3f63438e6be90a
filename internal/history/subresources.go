package history

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/plugin"
)

// transcriptREST serves agentrunrecords/NAME/transcript: the record's
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

func subMeta(ctx context.Context, name, uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: genericapirequest.NamespaceValue(ctx), UID: types.UID(uid)}
}

// Get renders the journal.
func (t *transcriptREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	row, err := t.records.find(ctx, name, "")
	if err != nil {
		return nil, err
	}
	entries, err := t.records.store.RecordJournal(ctx, row.Namespace, row.Name, row.UID)
	if err != nil {
		return nil, storeError(err)
	}
	out := &hv1.AgentRunTranscript{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunTranscript"},
		ObjectMeta: subMeta(ctx, name, row.UID),
	}
	for _, l := range plugin.TranscriptLines(entries) {
		out.Lines = append(out.Lines, hv1.TranscriptLine{Seq: l.Seq, At: l.At, Turn: l.Turn, What: l.What, Detail: l.Detail})
	}
	return out, nil
}

// Get reads the output.
func (o *outputREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	row, err := o.records.find(ctx, name, "")
	if err != nil {
		return nil, err
	}
	text, ok, err := o.records.store.RecordOutput(ctx, row.UID)
	if err != nil {
		return nil, storeError(err)
	}
	return &hv1.AgentRunOutput{
		TypeMeta:   metav1.TypeMeta{APIVersion: hv1.GroupVersion.String(), Kind: "AgentRunOutput"},
		ObjectMeta: subMeta(ctx, name, row.UID),
		Stored:     ok,
		Output:     text,
	}, nil
}
