package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentRunSchedule creates AgentRuns from a template on a cron schedule,
// with CronJob's semantics: a concurrency policy, a starting deadline that
// bounds catch-up after an outage to one run, suspend, and history limits
// on finished runs (docs/scheduling.md). The runs it creates are owned by
// it and named after their scheduled time, so no time is ever run twice.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ars,categories=agentrun-all
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name may have at most 52 characters: the runs are named <schedule>-<unix seconds of their time> and carry the name in a label"
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeCount`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next",type=string,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRunSchedule struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the schedule and the run template.
	// +required
	Spec AgentRunScheduleSpec `json:"spec,omitzero"`

	// status is what the schedule last did and will do next.
	// +optional
	Status AgentRunScheduleStatus `json:"status,omitempty,omitzero"`
}

// AgentRunScheduleSpec is when to create runs, from what, and how they may
// overlap.
type AgentRunScheduleSpec struct {
	// schedule is a cron expression: five fields (minute hour day-of-month
	// month day-of-week), six with a leading seconds field, or a
	// descriptor (@hourly, @daily, @every 30s, ...). Put the time zone in
	// timeZone, not in a CRON_TZ= or TZ= prefix.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.trim().startsWith('CRON_TZ=') && !self.trim().startsWith('TZ=')",message="schedule must not carry a CRON_TZ= or TZ= prefix: set spec.timeZone"
	// +kubebuilder:validation:XValidation:rule=`self.trim().startsWith('@') || self.trim().startsWith('CRON_TZ=') || self.trim().startsWith('TZ=') || (size(self.trim().split(' ').filter(f, f != '')) in [5, 6] && self.matches(r'^ *[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+)* *$'))`,message="schedule must have 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), separated by spaces, each of digits, names and * / , - ?; or be a descriptor such as @hourly or @every 10s"
	// +kubebuilder:validation:XValidation:rule=`!self.trim().startsWith('@') || self.trim().matches(r'^@(yearly|annually|monthly|weekly|daily|midnight|hourly|every ([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+)$')`,message="schedule descriptor must be one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration> (e.g. @every 1h30m)"
	Schedule string `json:"schedule,omitempty"`

	// timeZone is the IANA time zone the schedule is read in (for example
	// Europe/Berlin); unset, UTC.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') && self != 'Local' && timestamp('2000-06-15T12:00:00Z').getFullYear(self) == 2000`,message="timeZone must be an IANA time zone name such as UTC or Europe/Berlin"
	TimeZone string `json:"timeZone,omitempty"`

	// template is the run each scheduled time creates. Its spec is checked
	// as an AgentRun's when the schedule is applied and changed (a server
	// dry run); a spec the API server refuses is the schedule's Ready
	// condition (reason TemplateInvalid), and no run is created.
	// +required
	Template AgentRunTemplate `json:"template,omitzero"`

	// concurrencyPolicy says what happens when a time comes while an
	// earlier run of the schedule is still active: Allow starts the new
	// one too, Forbid skips the time, Replace cancels the active runs
	// (spec.cancel) and starts the new one.
	// +optional
	// +default="Allow"
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// startingDeadlineSeconds is how late a run may still start after its
	// scheduled time (after a manager outage, say); a time missed by more
	// is skipped. Whatever the outage, at most the latest missed time is
	// run. Unset, a missed time is run however late.
	// +optional
	// +kubebuilder:validation:Minimum=1
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// suspend stops new runs from being created; runs already created go
	// on. Times that pass while suspended are not run later unless they
	// are still within startingDeadlineSeconds when it is lifted. The
	// default is written, so the SUSPEND column reads false, not blank.
	// +optional
	// +default=false
	Suspend bool `json:"suspend,omitempty"`

	// successfulRunsHistoryLimit is how many Complete runs are kept; older
	// ones are deleted with their journals.
	// +optional
	// +default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	SuccessfulRunsHistoryLimit *int32 `json:"successfulRunsHistoryLimit,omitempty"`

	// failedRunsHistoryLimit is how many runs that ended in Error or were
	// cancelled are kept; older ones are deleted with their journals.
	// +optional
	// +default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	FailedRunsHistoryLimit *int32 `json:"failedRunsHistoryLimit,omitempty"`
}

// AgentRunTemplate is the run a schedule creates: its labels, annotations
// and spec.
type AgentRunTemplate struct {
	// metadata holds the labels and annotations every created run carries
	// (the schedule adds agentrun.dev/schedule and
	// agentrun.dev/scheduled-at).
	// +optional
	Metadata TemplateMetadata `json:"metadata,omitempty,omitzero"`

	// spec is the created runs' spec, as in an AgentRun. It is validated
	// as one when the schedule is applied (dry run) and when each run is
	// created, not by this resource's schema, so that the run's
	// create-only rules (agent and task are immutable on a run) do not
	// freeze the template.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Spec AgentRunSpec `json:"spec,omitzero"`
}

// TemplateMetadata is the metadata a template may set on its runs.
type TemplateMetadata struct {
	// labels are put on every created run.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`
	// annotations are put on every created run.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ConcurrencyPolicy is what a schedule does when a time comes while an
// earlier run is still active.
// +kubebuilder:validation:Enum=Allow;Forbid;Replace
type ConcurrencyPolicy string

// Concurrency policies (CronJob's).
const (
	// ConcurrencyAllow starts the new run alongside the active ones.
	ConcurrencyAllow ConcurrencyPolicy = "Allow"
	// ConcurrencyForbid skips the time while a run is active.
	ConcurrencyForbid ConcurrencyPolicy = "Forbid"
	// ConcurrencyReplace cancels the active runs and starts the new one.
	ConcurrencyReplace ConcurrencyPolicy = "Replace"
)

// AgentRunScheduleStatus is what the schedule has done and will do.
type AgentRunScheduleStatus struct {
	// observedGeneration is the spec generation this status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// active names the schedule's runs that have not finished.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=253
	Active []string `json:"active,omitempty"`
	// activeCount is len(active), for the ACTIVE column. Its default is
	// written, so the column reads 0, not blank, when no run is active.
	// +optional
	// +default=0
	ActiveCount int32 `json:"activeCount,omitempty"`
	// lastScheduleTime is the scheduled time of the latest run created.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// lastSuccessfulTime is when the latest Complete run finished.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// nextScheduleTime is the next time a run is due (absent while
	// suspended or when the schedule is invalid).
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// missedCount is how many scheduled times were given up because their
	// run could not be created within startingDeadlineSeconds (a manager
	// outage, a suspend, a Forbid wait), each with a Warning MissSchedule
	// event. After an outage only the latest time counts, as only it
	// would have been run. Its default is written, so it reads 0.
	// +optional
	// +default=0
	// +kubebuilder:validation:Minimum=0
	MissedCount int32 `json:"missedCount,omitempty"`
	// lastMissedTime is the latest scheduled time given up so.
	// +optional
	LastMissedTime *metav1.Time `json:"lastMissedTime,omitempty"`
	// conditions hold Ready: True while the schedule parses and its
	// template is accepted (reason Scheduled, or Suspended), False with
	// reason InvalidSchedule or TemplateInvalid and the error. Stalled is
	// True, with the same reason, while the schedule cannot create runs
	// until its spec is changed; it is absent otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AgentRunScheduleList is a list of AgentRunSchedules.
//
// +kubebuilder:object:root=true
type AgentRunScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentRunSchedule `json:"items"`
}

// Labels and annotations the schedule sets on the runs it creates.
const (
	// LabelSchedule names the schedule that created a run.
	LabelSchedule = "agentrun.dev/schedule"
	// AnnotationScheduledAt is the run's scheduled time (RFC 3339).
	AnnotationScheduledAt = "agentrun.dev/scheduled-at"
)

// Condition reasons of an AgentRunSchedule. Ready is its one condition
// while it works; InvalidSchedule and TemplateInvalid are also the reason
// of Stalled=True, which kstatus readers (kubectl wait, Argo CD, Flux)
// take as "will not progress without a change".
const (
	// ReasonScheduled: the schedule parses and its template is accepted;
	// runs are created at their times.
	ReasonScheduled = "Scheduled"
	// ReasonSuspended: spec.suspend is set; no run is created.
	ReasonSuspended = "Suspended"
	// ReasonInvalidSchedule: spec.schedule or spec.timeZone does not parse
	// (only reachable when the API server's checks are bypassed): Ready
	// False, Stalled True.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonTemplateInvalid: the API server refused the template as an
	// AgentRun; the message is its answer. Ready False, Stalled True.
	ReasonTemplateInvalid = "TemplateInvalid"
)
