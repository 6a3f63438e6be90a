// Package v1alpha1 holds the history API, group history.agentrun.dev: the
// archive of finished AgentRuns served by the history server (an
// aggregated API, internal/history) rather than stored in etcd, so it has
// no CRDs.
//
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +groupName=history.agentrun.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the history API's group.
const GroupName = "history.agentrun.dev"

var (
	// GroupVersion is the history API's group and version.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resources, as RBAC rules and the API's URLs name them.
const (
	ResourceRecords       = "agentrunrecords"
	ResourceCostReports   = "agentruncostreports"
	SubresourceTranscript = "transcript"
	SubresourceOutput     = "output"
	SubresourceJournal    = "journal"
)

// SourceAnnotation, on a transcript, a journal or an output, says what it
// was read from: the archived record (SourceArchive), or the journal of a
// run not archived yet, still in the cluster, whose journal is in the
// database (SourceJournal; status.journalStore Database).
const (
	SourceAnnotation = "history.agentrun.dev/source"
	SourceArchive    = "archive"
	SourceJournal    = "journal"
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&AgentRunRecord{}, &AgentRunRecordList{},
		&AgentRunTranscript{}, &AgentRunOutput{}, &AgentRunJournal{},
		&AgentRunCostReport{}, &AgentRunCostReportList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
