package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func init() { SchemeBuilder.Register(addQuotaTypes) }

// addQuotaTypes registers the quota kinds (each with its list).
func addQuotaTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&AgentRunQuota{}, &AgentRunQuotaList{},
		&ClusterAgentRunQuota{}, &ClusterAgentRunQuotaList{},
	)
	return nil
}

// AgentRunQuota bounds what the runs of its namespace may spend and how
// many may run, per period (a day, a week, a month in a time zone) or in
// total: cost in USD, tokens, runs started and runs active at once. A run
// that would exceed it is not started, and a running run parks before its
// next model call, both waiting on QuotaExceeded until the period resets
// or the quota is raised; none fails. Spend is counted exactly across
// replicas from the database store's ledger of calls, so cost, tokens,
// runs and a period need a database store (docs/quotas.md).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=arq
// +kubebuilder:printcolumn:name="Used/Hard",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Period",type=string,JSONPath=`.spec.period`
// +kubebuilder:printcolumn:name="Resets",type=string,JSONPath=`.status.resetAt`
// +kubebuilder:printcolumn:name="Exceeded",type=string,JSONPath=`.status.conditions[?(@.type=="Exceeded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRunQuota struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the limits.
	// +required
	Spec AgentRunQuotaSpec `json:"spec,omitzero"`

	// status is what the quota's runs have used.
	// +optional
	Status AgentRunQuotaStatus `json:"status,omitempty,omitzero"`
}

// ClusterAgentRunQuota is an AgentRunQuota shared by the runs of every
// namespace its namespaceSelector matches (all namespaces when it has
// none), for a team that owns several namespaces: their runs count
// together against one set of limits.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=carq
// +kubebuilder:printcolumn:name="Used/Hard",type=string,JSONPath=`.status.summary`
// +kubebuilder:printcolumn:name="Period",type=string,JSONPath=`.spec.period`
// +kubebuilder:printcolumn:name="Resets",type=string,JSONPath=`.status.resetAt`
// +kubebuilder:printcolumn:name="Exceeded",type=string,JSONPath=`.status.conditions[?(@.type=="Exceeded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterAgentRunQuota struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec holds the limits and the namespaces they cover.
	// +required
	Spec ClusterAgentRunQuotaSpec `json:"spec,omitzero"`

	// status is what the quota's runs have used.
	// +optional
	Status AgentRunQuotaStatus `json:"status,omitempty,omitzero"`
}

// AgentRunQuotaSpec is a quota's limits, its period and which runs it
// counts.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeZone) || has(self.period)",message="spec.timeZone needs spec.period: a running total has no period boundaries",fieldPath=".timeZone"
type AgentRunQuotaSpec struct {
	// hard are the limits; at least one must be set.
	// +required
	Hard QuotaHard `json:"hard,omitzero"`
	// period is how often the counts of cost, tokens and runs start again
	// from zero: Day (at midnight), Week (Monday at midnight) or Month (the
	// first at midnight), in timeZone. Absent: they are running totals,
	// lifted only by raising the limit. activeRuns has no period.
	// +optional
	Period QuotaPeriod `json:"period,omitempty"`
	// timeZone is the IANA time zone (for example Europe/Berlin) period's
	// midnights are in; UTC when absent.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == 'UTC' || (self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$') && timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0)",message="spec.timeZone must be an IANA time zone name such as Europe/Berlin or UTC"
	TimeZone string `json:"timeZone,omitempty"`
	// selector narrows the quota to some runs: those whose labels match
	// labels and whose spec.agent is one of agents (both, when both are
	// set). A child run (a fan-out worker, a sub-agent) counts with the
	// root of its run tree, whose labels and agent are matched. Absent:
	// every run of the namespaces the quota covers.
	// +optional
	Selector *QuotaSelector `json:"selector,omitempty"`
}

// ClusterAgentRunQuotaSpec is an AgentRunQuotaSpec over the namespaces a
// selector matches.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeZone) || has(self.period)",message="spec.timeZone needs spec.period: a running total has no period boundaries",fieldPath=".timeZone"
type ClusterAgentRunQuotaSpec struct {
	// hard are the limits; at least one must be set.
	// +required
	Hard QuotaHard `json:"hard,omitzero"`
	// period is how often the counts start again, as in an
	// AgentRunQuota's spec.period.
	// +optional
	Period QuotaPeriod `json:"period,omitempty"`
	// timeZone is the IANA time zone of the period's midnights, as in an
	// AgentRunQuota's spec.timeZone.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self == 'UTC' || (self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$') && timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0)",message="spec.timeZone must be an IANA time zone name such as Europe/Berlin or UTC"
	TimeZone string `json:"timeZone,omitempty"`
	// selector picks the runs counted, as in an AgentRunQuota's
	// spec.selector.
	// +optional
	Selector *QuotaSelector `json:"selector,omitempty"`
	// namespaceSelector picks the namespaces whose runs count, by their
	// labels; absent: every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// Common is the part of a cluster quota's spec a namespaced one has too.
func (s *ClusterAgentRunQuotaSpec) Common() AgentRunQuotaSpec {
	return AgentRunQuotaSpec{Hard: s.Hard, Period: s.Period, TimeZone: s.TimeZone, Selector: s.Selector}
}

// QuotaHard are a quota's limits. A limit left out is not enforced (and
// not shown); 0 allows nothing.
//
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:XValidation:rule="has(self.cost) || has(self.tokens) || has(self.runs) || has(self.activeRuns)",message="spec.hard needs at least one of cost, tokens, runs and activeRuns"
type QuotaHard struct {
	// cost is the most the quota's runs may spend in a period, in US
	// dollars as a decimal string with at most nine decimals ("200",
	// "0.50"). Each model call counts what its provider's rate card prices
	// it at; a call to a model without a rate card counts at the
	// documented worst-case rates (docs/quotas.md).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}([.][0-9]{1,9})?$`
	Cost string `json:"cost,omitempty"`
	// tokens is the most prompt and completion tokens the quota's runs may
	// use in a period.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Tokens *int64 `json:"tokens,omitempty"`
	// runs is the most runs that may start in a period (child runs count
	// with their tree's root, not on their own).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Runs *int64 `json:"runs,omitempty"`
	// activeRuns is the most runs that may be started and unfinished at
	// once, whatever they wait on (child runs count with their tree's root).
	// It needs no database store.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ActiveRuns *int32 `json:"activeRuns,omitempty"`
}

// QuotaPeriod is how often a quota's counts start again.
// +kubebuilder:validation:Enum=Day;Week;Month
type QuotaPeriod string

// Quota periods.
const (
	// QuotaDay starts again at every midnight.
	QuotaDay QuotaPeriod = "Day"
	// QuotaWeek starts again at midnight between Sunday and Monday.
	QuotaWeek QuotaPeriod = "Week"
	// QuotaMonth starts again at midnight of every month's first day.
	QuotaMonth QuotaPeriod = "Month"
)

// QuotaSelector picks the runs a quota counts.
type QuotaSelector struct {
	// labels is a label selector over the run's (its tree root's) labels.
	// +optional
	Labels *metav1.LabelSelector `json:"labels,omitempty"`
	// agents are blueprint ConfigMap names (spec.agent of the run, or of
	// its tree's root).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Agents []string `json:"agents,omitempty"`
}

// QuotaResource names what a quota limits.
// +kubebuilder:validation:Enum=cost;tokens;runs;activeRuns
type QuotaResource string

// Quota resources.
const (
	QuotaCost       QuotaResource = "cost"
	QuotaTokens     QuotaResource = "tokens"
	QuotaRuns       QuotaResource = "runs"
	QuotaActiveRuns QuotaResource = "activeRuns"
)

// QuotaResources lists the resources in the order they are shown.
var QuotaResources = []QuotaResource{QuotaCost, QuotaTokens, QuotaRuns, QuotaActiveRuns}

// AgentRunQuotaStatus is what a quota's runs have used, as of the last
// status write (the manager refreshes it every few seconds while it moves).
type AgentRunQuotaStatus struct {
	// observedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// used is what the quota's runs have used in the current period, for
	// each limit spec.hard sets: cost and tokens of the calls answered,
	// plus the worst case of the calls in flight (inFlight), runs started
	// and runs active now.
	// +optional
	Used QuotaUsed `json:"used,omitempty,omitzero"`
	// inFlight is the part of used reserved by calls not answered yet:
	// each call reserves its worst case before it is made and settles to
	// what it cost once answered.
	// +optional
	InFlight QuotaInFlight `json:"inFlight,omitempty,omitzero"`
	// periodStart is when the current period began; absent for a running
	// total.
	// +optional
	PeriodStart *metav1.Time `json:"periodStart,omitempty"`
	// resetAt is when the current period ends and the counts of cost,
	// tokens and runs start again; absent for a running total.
	// +optional
	ResetAt *metav1.Time `json:"resetAt,omitempty"`
	// exceeded lists the limits with no room left: activeRuns and runs
	// at their limit, cost and tokens used up or without room for the
	// last call refused. Runs waiting on the quota wait on one of these.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	Exceeded []QuotaResource `json:"exceeded,omitempty"`
	// summary renders used/hard for listings, like a ResourceQuota's:
	// "cost: 0.42/1, activeRuns: 3/20".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Summary string `json:"summary,omitempty"`
	// conditions hold Ready (the counts could be read: True, or False with
	// why) and Exceeded (True while some limit has no room left: the
	// message names it).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// QuotaUsed is what a quota's runs have used, one field per limit.
type QuotaUsed struct {
	// cost in US dollars, as an exact decimal string.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Cost string `json:"cost,omitempty"`
	// tokens are prompt plus completion tokens.
	// +optional
	Tokens *int64 `json:"tokens,omitempty"`
	// runs counts the runs started in the period.
	// +optional
	Runs *int64 `json:"runs,omitempty"`
	// activeRuns counts the runs started and not finished.
	// +optional
	ActiveRuns *int32 `json:"activeRuns,omitempty"`
	// unpricedCalls counts answered calls to models without a rate card,
	// which cost counts at the worst-case rates: the cost shown is then an
	// upper bound, not the bill.
	// +optional
	UnpricedCalls int64 `json:"unpricedCalls,omitempty"`
}

// QuotaInFlight is what calls not answered yet have reserved.
type QuotaInFlight struct {
	// cost reserved, in US dollars.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Cost string `json:"cost,omitempty"`
	// tokens reserved.
	// +optional
	Tokens *int64 `json:"tokens,omitempty"`
	// calls counts the calls in flight.
	// +optional
	Calls int64 `json:"calls,omitempty"`
}

// AgentRunQuotaList is a list of AgentRunQuotas.
//
// +kubebuilder:object:root=true
type AgentRunQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRunQuota `json:"items"`
}

// ClusterAgentRunQuotaList is a list of ClusterAgentRunQuotas.
//
// +kubebuilder:object:root=true
type ClusterAgentRunQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAgentRunQuota `json:"items"`
}

// Quota kinds, as a quota is named in waits, metrics and the store:
// "<kind>/<name>" for a cluster quota, "<kind>/<namespace>/<name>" for a
// namespaced one.
const (
	KindAgentRunQuota        = "AgentRunQuota"
	KindClusterAgentRunQuota = "ClusterAgentRunQuota"
)

// Quota condition types and reasons.
const (
	// ConditionExceeded is True while some limit of the quota has no room
	// left for another call or run; its message names the limits, their
	// use and when the period resets.
	ConditionExceeded = "Exceeded"
	// ReasonCounted: the quota's use was read (Ready=True).
	ReasonCounted = "Counted"
	// ReasonStoreUnavailable: the database store could not be read
	// (Ready=False); the message says why.
	ReasonStoreUnavailable = "StoreUnavailable"
	// ReasonNeedsDatabase: the quota limits cost, tokens or runs, or has a
	// period, and the manager has no database store to count them in
	// (Ready=False); only activeRuns is enforced.
	ReasonNeedsDatabase = "NeedsDatabase"
	// ReasonInvalidQuota: the manager cannot read the quota's limits or
	// period (Ready=False; a time zone this binary does not know).
	ReasonInvalidQuota = "InvalidQuota"
	// ReasonQuotaExceeded: a limit has no room left (Exceeded=True).
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonWithinQuota: every limit has room (Exceeded=False).
	ReasonWithinQuota = "WithinQuota"
)
