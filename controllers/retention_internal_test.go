package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// TestRetentionOfAFinishedRun: the spec's TTL wins; else the manager's
// default, except for runs a GitOps tool manages (deleting them would have
// them applied, and run, again); no default keeps runs.
func TestRetentionOfAFinishedRun(t *testing.T) {
	day, hour := 24*time.Hour, time.Hour
	ttl := func(s int32) func(*arv1.AgentRun) {
		return func(r *arv1.AgentRun) { r.Spec.TTLSecondsAfterFinished = &s }
	}
	cases := []struct {
		name string
		def  *time.Duration
		edit func(*arv1.AgentRun)
		want time.Duration
		keep bool
	}{
		{name: "no default, no TTL: kept", keep: true},
		{name: "the spec's TTL", edit: ttl(60), want: time.Minute},
		{name: "the spec's TTL over the default", def: &day, edit: ttl(0), want: 0},
		{name: "the default", def: &hour, want: hour},
		{name: "an Argo CD app's run: kept", def: &hour, edit: func(r *arv1.AgentRun) { r.Labels = map[string]string{"argocd.argoproj.io/instance": "app"} }, keep: true},
		{name: "a Flux run: kept", def: &hour, edit: func(r *arv1.AgentRun) {
			r.Annotations = map[string]string{"kustomize.toolkit.fluxcd.io/name": "k"}
		}, keep: true},
		{name: "a GitOps run with its own TTL", def: &hour, edit: func(r *arv1.AgentRun) {
			r.Labels = map[string]string{"helm.toolkit.fluxcd.io/name": "h"}
			ttl(5)(r)
		}, want: 5 * time.Second},
	}
	for _, c := range cases {
		run := &arv1.AgentRun{}
		if c.edit != nil {
			c.edit(run)
		}
		got, ok := Retention{Default: c.def}.ttlOf(run)
		if ok == c.keep || (ok && got != c.want) {
			t.Errorf("%s: ttlOf = %v, %v; want %v (kept: %v)", c.name, got, ok, c.want, c.keep)
		}
	}
}

// TestRetentionRequeuesForTheDeletion: a finished run is looked at again
// when its TTL is up (sooner if the result already asks), not while its
// webhook is unsettled, and never when it is kept.
func TestRetentionRequeuesForTheDeletion(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	finished := func(ago time.Duration) *arv1.AgentRun {
		at := metav1.NewTime(now.Add(-ago))
		s := int32(3600)
		return &arv1.AgentRun{Spec: arv1.AgentRunSpec{TTLSecondsAfterFinished: &s}, Status: arv1.AgentRunStatus{FinishedAt: &at}}
	}
	pending := finished(0)
	pending.Spec.Callback = &arv1.CallbackSpec{}
	pending.Status.Callback = &arv1.CallbackStatus{State: arv1.CallbackPending}
	cases := []struct {
		name string
		run  *arv1.AgentRun
		in   time.Duration
		want time.Duration
	}{
		{name: "finished now", run: finished(0), want: time.Hour},
		{name: "half way", run: finished(30 * time.Minute), want: 30 * time.Minute},
		{name: "past its time: at once", run: finished(2 * time.Hour), want: time.Millisecond},
		{name: "a sooner requeue stays", run: finished(0), in: time.Minute, want: time.Minute},
		{name: "a later requeue is brought forward", run: finished(0), in: 2 * time.Hour, want: time.Hour},
		{name: "kept", run: &arv1.AgentRun{Status: arv1.AgentRunStatus{FinishedAt: &metav1.Time{Time: now}}}, in: time.Minute, want: time.Minute},
		{name: "its webhook unsettled", run: pending, want: 0},
		{name: "no finish time", run: &arv1.AgentRun{Spec: finished(0).Spec}, want: 0},
	}
	for _, c := range cases {
		if got := (Retention{}).requeue(c.run, now, ctrl.Result{RequeueAfter: c.in}).RequeueAfter; got != c.want {
			t.Errorf("%s: requeue after %v, want %v", c.name, got, c.want)
		}
	}
}
