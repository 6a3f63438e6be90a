package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// AgentRunRecord is a finished AgentRun as the archive keeps it: the run's
// metadata (name, namespace, uid, labels, annotations, creation time),
// spec and final status exactly as the custom resource showed them when
// it finished, and what only the archive knows (its children, when it was
// archived, whether an output is stored). Read-only; delete purges it.
//
// +kubebuilder:object:root=true
type AgentRunRecord struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the run's; resourceVersion is when the record was
	// archived (Unix microseconds).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the run's spec.
	// +optional
	Spec arv1.AgentRunSpec `json:"spec,omitempty"`
	// status is the run's final status: phase, usage and cost (costUSD
	// "unknown" when a call could not be priced), conditions, times.
	// +optional
	Status arv1.AgentRunStatus `json:"status,omitempty"`
	// archive is what the archive adds.
	// +optional
	Archive RecordArchive `json:"archive,omitempty"`
}

// RecordArchive is what the archive knows of a run beyond its resource.
type RecordArchive struct {
	// archivedAt is when the record was written.
	// +optional
	ArchivedAt metav1.Time `json:"archivedAt,omitempty"`
	// finishedAt is the finish time the record is listed and selected by
	// (status.finishedAt, or the archive time when the run had none).
	// +optional
	FinishedAt metav1.Time `json:"finishedAt,omitempty"`
	// children are the run's child runs as they stood when it finished.
	// +optional
	// +listType=atomic
	Children []RecordChild `json:"children,omitempty"`
	// hasOutput says a final output is stored (the output subresource).
	// +optional
	HasOutput bool `json:"hasOutput,omitempty"`
}

// RecordChild is one child run of an archived run.
type RecordChild struct {
	// name of the child run.
	// +required
	Name string `json:"name"`
	// uid of the child run.
	// +optional
	UID string `json:"uid,omitempty"`
	// phase the child was in.
	// +optional
	Phase arv1.Phase `json:"phase,omitempty"` //nolint:kubeapilinter // the child's status.phase as its CR showed it
}

// AgentRunRecordList is a page of records, newest finished first.
//
// +kubebuilder:object:root=true
type AgentRunRecordList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the records.
	Items []AgentRunRecord `json:"items"`
}

// AgentRunTranscript is a record's journal as `kubectl agentrun
// transcript` renders it: one line per entry, in seq order (the
// transcript subresource).
//
// +kubebuilder:object:root=true
type AgentRunTranscript struct {
	metav1.TypeMeta `json:",inline"`
	// metadata names the record.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// lines are the transcript's lines.
	// +optional
	// +listType=atomic
	Lines []TranscriptLine `json:"lines,omitempty"`
}

// TranscriptLine is one journal entry as the transcript shows it.
type TranscriptLine struct {
	// seq is the entry's place in the journal.
	// +required
	Seq int64 `json:"seq"`
	// at is RFC 3339 in UTC, "-" when the entry has no time.
	// +required
	At string `json:"at"`
	// turn is "stage[iteration]" ("title" for the title call, "-" before any).
	// +required
	Turn string `json:"turn"`
	// what the entry is, in words.
	// +required
	What string `json:"what"`
	// detail of the entry.
	// +optional
	Detail string `json:"detail,omitempty"`
}

// AgentRunJournal is a run's journal as its manager wrote it (the journal
// subresource): every entry in seq order, each the JSON object the journal
// stores, for readers that work on entries rather than on a transcript's
// lines (kubectl agentrun describe, regions, fork --from-entry, transcript
// --follow, approve --args --wait).
//
// +kubebuilder:object:root=true
type AgentRunJournal struct {
	metav1.TypeMeta `json:",inline"`
	// metadata names the record or the run; uid is whose journal it is.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// entries are the journal's entries, in seq order.
	// +optional
	// +listType=atomic
	Entries []runtime.RawExtension `json:"entries,omitempty"`
}

// AgentRunOutput is a record's final output (the output subresource).
//
// +kubebuilder:object:root=true
type AgentRunOutput struct {
	metav1.TypeMeta `json:",inline"`
	// metadata names the record.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// stored says the run left an output; false: it finished without one.
	// +required
	Stored bool `json:"stored"`
	// output is the final output's text.
	// +optional
	Output string `json:"output,omitempty"`
}

// AgentRunCostReport is one group of the cost report: the model calls of
// one namespace, agent, model and UTC day (the dimensions not grouped by
// read empty) in the report's time range, summed from the call ledger.
//
// +kubebuilder:object:root=true
type AgentRunCostReport struct {
	metav1.TypeMeta `json:",inline"`
	// metadata names the group: name joins the group's values, namespace
	// is the group's namespace.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec says what was summed.
	// +optional
	Spec CostReportGroup `json:"spec,omitempty"`
	// status holds the sums.
	// +required
	Status CostReportTotals `json:"status"`
}

// CostReportGroup is a cost report group's values and the time range.
type CostReportGroup struct {
	// from is the range's start (inclusive).
	// +optional
	From metav1.Time `json:"from,omitempty"`
	// to is the range's end (exclusive).
	// +optional
	To metav1.Time `json:"to,omitempty"`
	// namespace of the calls, when grouped by namespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// agent of the calls' runs, when grouped by agent ("" for runs not
	// archived yet).
	// +optional
	Agent string `json:"agent,omitempty"`
	// model called, when grouped by model.
	// +optional
	Model string `json:"model,omitempty"`
	// day is the UTC day (YYYY-MM-DD), when grouped by day.
	// +optional
	Day string `json:"day,omitempty"`
}

// CostReportTotals are a group's sums. Unknown cost is counted apart:
// costUSD is "unknown" when any call could not be priced, pricedUSD sums
// the calls that were, and unpricedCalls counts the others.
type CostReportTotals struct {
	// calls answered.
	// +required
	Calls int64 `json:"calls"`
	// promptTokens billed.
	// +optional
	PromptTokens int64 `json:"promptTokens,omitempty"`
	// completionTokens billed.
	// +optional
	CompletionTokens int64 `json:"completionTokens,omitempty"`
	// totalTokens is promptTokens + completionTokens.
	// +optional
	TotalTokens int64 `json:"totalTokens,omitempty"`
	// costUSD is the group's cost as a decimal string, or "unknown".
	// +required
	CostUSD string `json:"costUSD"`
	// pricedUSD sums the priced calls.
	// +required
	PricedUSD string `json:"pricedUSD"`
	// unpricedCalls could not be priced; their cost is unknown, not 0.
	// +optional
	UnpricedCalls int64 `json:"unpricedCalls,omitempty"`
}

// AgentRunCostReportList is the cost report: its groups, in the order of
// the dimensions grouped by.
//
// +kubebuilder:object:root=true
type AgentRunCostReportList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the groups.
	Items []AgentRunCostReport `json:"items"`
}
