// Package schedule reads an AgentRunSchedule's cron expression and time
// zone, validates a schedule's spec (the same checks the API server's CRD
// rules make, plus those CEL cannot: the cron grammar and the time zone
// database), and works out which scheduled time is due now.
package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
)

// parser reads five fields, six with leading seconds, and descriptors
// (@hourly, @every 10s). Seconds let a schedule run more often than once
// a minute, which CronJob cannot.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parsed is a schedule ready to be asked for its times.
type Parsed struct {
	sched cron.Schedule
	loc   *time.Location
}

// Parse reads spec.schedule in spec.timeZone (UTC when unset).
func Parse(spec *arv1.AgentRunScheduleSpec) (*Parsed, error) {
	if errs := Validate(spec); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	loc, _ := location(spec.TimeZone)
	s, _ := parser.Parse(strings.TrimSpace(spec.Schedule))
	return &Parsed{sched: s, loc: loc}, nil
}

// location loads an IANA zone; "" is UTC and "Local" (the manager's own
// zone, different on every host) is refused.
func location(tz string) (*time.Location, error) {
	if tz == "" {
		return time.UTC, nil
	}
	if strings.EqualFold(tz, "Local") {
		return nil, fmt.Errorf("the manager's local zone differs between hosts: name an IANA zone")
	}
	return time.LoadLocation(tz)
}

// Path is where the manager serves Validate as an admission webhook;
// config/webhook (generated from the marker below) points the API server
// at it.
const Path = "/validate-agentrun-dev-v1alpha1-agentrunschedule"

// +kubebuilder:webhook:path=/validate-agentrun-dev-v1alpha1-agentrunschedule,mutating=false,failurePolicy=fail,sideEffects=None,groups=agentrun.dev,resources=agentrunschedules,verbs=create;update,versions=v1alpha1,name=agentrunschedule.agentrun.dev,admissionReviewVersions=v1,timeoutSeconds=10

// Validate checks a schedule's spec; paths start at "spec". The admission
// webhook calls it (served at Path); the controller calls it too, for
// objects written while the webhook was away.
func Validate(spec *arv1.AgentRunScheduleSpec) field.ErrorList {
	root := field.NewPath("spec")
	var errs field.ErrorList
	sched := strings.TrimSpace(spec.Schedule)
	switch {
	case sched == "":
		errs = append(errs, field.Required(root.Child("schedule"), "a cron expression, e.g. \"0 * * * *\""))
	case strings.HasPrefix(sched, "CRON_TZ=") || strings.HasPrefix(sched, "TZ="):
		errs = append(errs, field.Invalid(root.Child("schedule"), spec.Schedule, "must not carry a CRON_TZ= or TZ= prefix: set spec.timeZone"))
	default:
		if _, err := parser.Parse(sched); err != nil {
			errs = append(errs, field.Invalid(root.Child("schedule"), spec.Schedule, err.Error()))
		}
	}
	if _, err := location(spec.TimeZone); err != nil {
		errs = append(errs, field.Invalid(root.Child("timeZone"), spec.TimeZone, err.Error()))
	}
	switch spec.ConcurrencyPolicy {
	case "", arv1.ConcurrencyAllow, arv1.ConcurrencyForbid, arv1.ConcurrencyReplace:
	default:
		errs = append(errs, field.NotSupported(root.Child("concurrencyPolicy"), spec.ConcurrencyPolicy,
			[]arv1.ConcurrencyPolicy{arv1.ConcurrencyAllow, arv1.ConcurrencyForbid, arv1.ConcurrencyReplace}))
	}
	if d := spec.StartingDeadlineSeconds; d != nil && *d < 1 {
		errs = append(errs, field.Invalid(root.Child("startingDeadlineSeconds"), *d, "must be at least 1"))
	}
	limits := []struct {
		name string
		v    *int32
	}{{"successfulRunsHistoryLimit", spec.SuccessfulRunsHistoryLimit}, {"failedRunsHistoryLimit", spec.FailedRunsHistoryLimit}}
	for _, l := range limits {
		if l.v != nil && *l.v < 0 {
			errs = append(errs, field.Invalid(root.Child(l.name), *l.v, "must not be negative"))
		}
	}
	return errs
}

// Next is the first scheduled time strictly after t.
func (p *Parsed) Next(t time.Time) time.Time {
	return p.sched.Next(t.In(p.loc))
}

// windows are the look-backs Due tries, shortest first, so finding the
// latest time at or before now never walks more than a window's worth of
// times, however long the outage (a storm of catch-ups is never even
// computed).
var windows = []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 367 * 24 * time.Hour}

// Times is what Due finds: the time to run now, or the one given up, and
// the next time.
type Times struct {
	// Due is the latest scheduled time in (after, now] when it is within
	// the starting deadline of now: the one time to run.
	Due *time.Time
	// Missed is that latest time when it is later than the deadline: it
	// is given up (a Warning MissSchedule, as CronJob records).
	Missed *time.Time
	// Next is the first scheduled time after now.
	Next time.Time
}

// Due looks at the scheduled times in (after, now]: the latest is due if
// it is within deadline of now (nil: any lateness), else missed. Earlier
// times are skipped either way: at most one run catches up.
func (p *Parsed) Due(after, now time.Time, deadline *time.Duration) Times {
	var latest *time.Time
	var next time.Time
	if every, ok := p.sched.(cron.ConstantDelaySchedule); ok {
		latest, next = latestEvery(every.Delay, after, now)
	} else {
		latest, next = p.latest(after, now), p.Next(now)
	}
	switch {
	case latest == nil:
		return Times{Next: next}
	case deadline != nil && now.Sub(*latest) > *deadline:
		return Times{Missed: latest, Next: next}
	}
	return Times{Due: latest, Next: next}
}

// latest is the last scheduled time in (after, now], or nil.
func (p *Parsed) latest(after, now time.Time) *time.Time {
	for _, w := range windows {
		start := after
		if s := now.Add(-w); s.After(start) {
			start = s
		}
		if latest := p.latestIn(start, now); latest != nil {
			return latest
		}
		if !start.After(after) {
			break // the window reached back to after: there is none
		}
	}
	return nil
}

// latestEvery is latest and Next for @every: the times are after+delay,
// after+2*delay, ... (after taken to the whole second), counted in one
// step.
func latestEvery(delay time.Duration, after, now time.Time) (*time.Time, time.Time) {
	after = after.Truncate(time.Second)
	k := int64(0)
	if now.After(after) {
		k = int64(now.Sub(after) / delay)
	}
	next := after.Add(time.Duration(k+1) * delay)
	if k == 0 {
		return nil, next
	}
	latest := after.Add(time.Duration(k) * delay)
	return &latest, next
}

// latestIn walks the times in (start, now] and returns the last.
func (p *Parsed) latestIn(start, now time.Time) *time.Time {
	var latest *time.Time
	for t := p.Next(start); !t.IsZero() && !t.After(now); t = p.Next(t) {
		latest = &t
	}
	return latest
}

// RunName names the run of a scheduled time: "<schedule>-<unix seconds>",
// the same whoever computes it, so a create repeated after a crash finds
// the first (AlreadyExists) instead of making a second.
func RunName(schedule string, t time.Time) string {
	return schedule + "-" + strconv.FormatInt(t.Unix(), 10)
}
