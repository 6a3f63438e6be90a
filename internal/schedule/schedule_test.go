package schedule_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/schedule"
)

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		name  string
		spec  arv1.AgentRunScheduleSpec
		field string
		says  string
	}{
		{"six-field with a bad seconds value", arv1.AgentRunScheduleSpec{Schedule: "99 * * * * *"}, "spec.schedule", "end of range (99) above maximum (59)"},
		{"too few fields", arv1.AgentRunScheduleSpec{Schedule: "* * *"}, "spec.schedule", "expected 5 to 6 fields"},
		{"CRON_TZ prefix", arv1.AgentRunScheduleSpec{Schedule: "CRON_TZ=UTC 0 * * * *"}, "spec.schedule", "set spec.timeZone"},
		{"unknown descriptor", arv1.AgentRunScheduleSpec{Schedule: "@fortnightly"}, "spec.schedule", "unrecognized descriptor"},
		{"unknown zone", arv1.AgentRunScheduleSpec{Schedule: "@hourly", TimeZone: "Mars/Olympus_Mons"}, "spec.timeZone", "unknown time zone"},
		{"the manager's local zone", arv1.AgentRunScheduleSpec{Schedule: "@hourly", TimeZone: "Local"}, "spec.timeZone", "IANA"},
		{"negative history", arv1.AgentRunScheduleSpec{Schedule: "@hourly", FailedRunsHistoryLimit: ptr.To[int32](-1)}, "spec.failedRunsHistoryLimit", "negative"},
		{"unknown policy", arv1.AgentRunScheduleSpec{Schedule: "@hourly", ConcurrencyPolicy: "Queue"}, "spec.concurrencyPolicy", "supported values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := schedule.Validate(&c.spec)
			if len(errs) != 1 {
				t.Fatalf("errors = %v, want exactly one on %s", errs, c.field)
			}
			if errs[0].Field != c.field || !strings.Contains(errs[0].Error(), c.says) {
				t.Errorf("error = %q on %s, want %q on %s", errs[0].Error(), errs[0].Field, c.says, c.field)
			}
		})
	}
	for _, ok := range []arv1.AgentRunScheduleSpec{
		{Schedule: "0 3 * * MON-FRI", TimeZone: "Europe/Berlin", ConcurrencyPolicy: arv1.ConcurrencyForbid},
		{Schedule: "*/2 * * * * *"},
		{Schedule: "@every 2s", StartingDeadlineSeconds: ptr.To[int64](10)},
	} {
		if errs := schedule.Validate(&ok); len(errs) != 0 {
			t.Errorf("%+v refused: %v", ok, errs)
		}
	}
}

func mustParse(t *testing.T, spec arv1.AgentRunScheduleSpec) *schedule.Parsed {
	t.Helper()
	p, err := schedule.Parse(&spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// After an outage only the latest missed time is due, and only when it is
// within the deadline; past it, that time is the one missed.
func TestDueCatchesUpOnceWithinTheDeadline(t *testing.T) {
	p := mustParse(t, arv1.AgentRunScheduleSpec{Schedule: "*/2 * * * * *"})
	last := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	now := last.Add(20*time.Second + 500*time.Millisecond) // ten times missed
	ten := 10 * time.Second
	got := p.Due(last, now, &ten)
	if got.Due == nil || !got.Due.Equal(last.Add(20*time.Second)) || got.Missed != nil {
		t.Fatalf("due = %v missed = %v, want only the latest missed time %v due", got.Due, got.Missed, last.Add(20*time.Second))
	}
	if !got.Next.Equal(last.Add(22 * time.Second)) {
		t.Errorf("next = %v, want %v", got.Next, last.Add(22*time.Second))
	}
	// Every time is later than the deadline: nothing is due, and the
	// latest time is the one missed.
	hourly := mustParse(t, arv1.AgentRunScheduleSpec{Schedule: "0 * * * *"})
	got = hourly.Due(last, last.Add(150*time.Minute), &ten)
	if got.Due != nil || got.Missed == nil || !got.Missed.Equal(last.Add(2*time.Hour)) {
		t.Errorf("due = %v missed = %v, want none due and 12:00 missed: it is 30m late with a 10s deadline", got.Due, got.Missed)
	}
	// Without a deadline the latest is due however late, and a year of
	// per-second times is not walked one by one (it would take seconds).
	every := mustParse(t, arv1.AgentRunScheduleSpec{Schedule: "@every 1s"})
	far := last.Add(365*24*time.Hour + 1500*time.Millisecond)
	if got := every.Due(last, far, nil); got.Due == nil || far.Sub(*got.Due) >= time.Second || got.Missed != nil {
		t.Errorf("due = %v missed = %v, want the latest second before %v due", got.Due, got.Missed, far)
	}
	// Nothing due, nothing missed, before the first time.
	if got := hourly.Due(last, last.Add(time.Minute), &ten); got.Due != nil || got.Missed != nil || !got.Next.Equal(last.Add(time.Hour)) {
		t.Errorf("due = %v missed = %v next = %v, want none and 11:00", got.Due, got.Missed, got.Next)
	}
	// A time exactly at the deadline is still due.
	if got := hourly.Due(last, last.Add(time.Hour+ten), &ten); got.Due == nil || got.Missed != nil {
		t.Errorf("due = %v missed = %v at exactly the deadline, want 11:00 due", got.Due, got.Missed)
	}
}

func TestTimeZoneShiftsTheTimes(t *testing.T) {
	p := mustParse(t, arv1.AgentRunScheduleSpec{Schedule: "0 9 * * *", TimeZone: "America/New_York"})
	from := time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)
	if got, want := p.Next(from), time.Date(2026, 7, 1, 13, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("next = %v, want 09:00 EDT = %v", got.UTC(), want)
	}
}

func TestRunNameIsTheScheduledSecond(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 0, 2, 0, time.UTC)
	if got := schedule.RunName("nightly", at); got != "nightly-1767261602" {
		t.Errorf("RunName = %q", got)
	}
}

// An @every schedule counts from its last time, whatever the deadline.
func TestDueEveryKeepsItsGrid(t *testing.T) {
	p := mustParse(t, arv1.AgentRunScheduleSpec{Schedule: "@every 2s"})
	last := time.Date(2026, 1, 1, 10, 0, 1, 0, time.UTC)
	nine := 9 * time.Second
	got := p.Due(last, last.Add(20*time.Second+500*time.Millisecond), &nine)
	if got.Due == nil || !got.Due.Equal(last.Add(20*time.Second)) || !got.Next.Equal(last.Add(22*time.Second)) {
		t.Fatalf("due %v next %v, want %v and %v", got.Due, got.Next, last.Add(20*time.Second), last.Add(22*time.Second))
	}
	if got := p.Due(last, last.Add(time.Second), nil); got.Due != nil || got.Missed != nil {
		t.Errorf("due %v missed %v before the first time", got.Due, got.Missed)
	}
	one := time.Second
	if got := p.Due(last, last.Add(3500*time.Millisecond), &one); got.Due != nil || got.Missed == nil || !got.Missed.Equal(last.Add(2*time.Second)) {
		t.Errorf("due %v missed %v, want 2 s missed: it is 1.5 s late with a 1 s deadline", got.Due, got.Missed)
	}
}
