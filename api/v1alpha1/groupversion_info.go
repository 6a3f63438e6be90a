// Package v1alpha1 holds the AgentRun API, group agentrun.dev.
//
// +kubebuilder:object:generate=true
// +groupName=agentrun.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of AgentRun.
	GroupVersion = schema.GroupVersion{Group: "agentrun.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the API's kinds (each with its list) under
// GroupVersion, with the meta/v1 types a group-version needs.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&AgentRun{}, &AgentRunList{},
		&AgentRunAnswer{}, &AgentRunAnswerList{},
		&AgentToolPolicy{}, &AgentToolPolicyList{},
		&ClusterAgentToolPolicy{}, &ClusterAgentToolPolicyList{},
		&AgentRunSchedule{}, &AgentRunScheduleList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
