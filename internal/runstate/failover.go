package runstate

import (
	"maps"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// Candidate is one entry of a stage's ordered model list, as resolved
// against the provider config and its credentials.
type Candidate struct {
	// Ref is "provider/model".
	Ref string
	// Block is a setup problem of this candidate (its Secret is missing...).
	Block *SetupBlock
	// SecretVersion is its credentials Secret's resourceVersion, and
	// ConfigVersion the provider ConfigMap's.
	SecretVersion, ConfigVersion string
	Credential                   Credential
	// CircuitOpenUntil is set while the provider's circuit is open, with
	// the class of the failure that opened it.
	CircuitOpenUntil *time.Time
	CircuitClass     string
}

// Selection is the candidate to call, or why none can be called.
type Selection struct {
	// Index of the chosen candidate, -1 when none.
	Index int
	// Block parks the run on the chosen candidate's setup problem, or on
	// every candidate being out of service.
	Block *SetupBlock
	// RetryAt is when an out-of-service candidate may be tried again by
	// itself (nil: only a Secret change helps).
	RetryAt *time.Time
	// Skipped are the candidates before the chosen one that were passed
	// over, and why: where failover happened.
	Skipped []Skipped
}

// Skipped is a candidate failover passed over.
type Skipped struct {
	Ref string
	// Why is the failure class (AuthFailed, ...) or "circuit open".
	Why string
}

// SelectCandidate walks the ordered model list and picks the first
// candidate that has not failed in the run (a failure stops counting once
// its Secret or the provider config changed, or, for outages, after
// RetryCooldown) and whose
// provider's circuit is closed: failover happens before any park. When all
// are out of service the run parks on their shared blocker, or on
// ProvidersUnavailable when they failed for different reasons.
func SelectCandidate(cands []Candidate, failed map[string]journal.FailedCall, now time.Time) Selection {
	var (
		skipped  []Skipped
		classes  = map[arv1.SetupBlocker]bool{}
		last     *SetupBlock
		retryAt  *time.Time
		earliest = func(t time.Time) {
			if retryAt == nil || t.Before(*retryAt) {
				retryAt = &t
			}
		}
	)
	for i, c := range cands {
		if fc, ok := failed[c.Ref]; ok && c.Block == nil && stillFailing(fc, c, now) {
			fl := fc.Failure
			classes[arv1.SetupBlocker(fl.Class)] = true
			last = &SetupBlock{Blocker: arv1.SetupBlocker(fl.Class), Remedy: ProviderRemedy(&fl, c.Credential), Refs: credentialRefs(c.Credential)}
			if fl.Class != journal.FailAuth && fl.Class != journal.FailForbidden {
				earliest(fc.At.Add(retryAfter(fl.Class)))
			}
			skipped = append(skipped, Skipped{Ref: c.Ref, Why: string(fl.Class)})
			continue
		}
		if c.CircuitOpenUntil != nil && now.Before(*c.CircuitOpenUntil) {
			blocker := arv1.BlockerProvidersUnavailable
			if c.CircuitClass != "" {
				blocker = arv1.SetupBlocker(c.CircuitClass)
			}
			classes[blocker] = true
			fl := journal.Failure{Class: journal.FailureClass(blocker), Message: "the provider failed repeatedly; its circuit is open"}
			last = &SetupBlock{Blocker: blocker, Remedy: ProviderRemedy(&fl, c.Credential), Refs: credentialRefs(c.Credential)}
			earliest(*c.CircuitOpenUntil)
			skipped = append(skipped, Skipped{Ref: c.Ref, Why: "circuit open (" + string(blocker) + ")"})
			continue
		}
		return Selection{Index: i, Block: c.Block, Skipped: skipped}
	}
	if last == nil {
		return Selection{Index: -1, Block: &SetupBlock{Blocker: arv1.BlockerProviderMissing, Remedy: "The stage lists no model to call."}}
	}
	if len(classes) > 1 {
		last.Blocker = arv1.BlockerProvidersUnavailable
		last.Remedy = "Every model the stage lists is out of service, for different reasons: " + last.Remedy
		if len(last.Remedy) > 1000 {
			last.Remedy = last.Remedy[:997] + "..."
		}
	}
	return Selection{Index: -1, Block: last, RetryAt: retryAt}
}

// CanFailOver reports whether, should the chosen candidate (index i) fail
// now, another would be called rather than the run parked: a model
// overloaded for long is given up on only then, since waiting out its
// overload beats parking the run.
func CanFailOver(cands []Candidate, i int, failed map[string]journal.FailedCall, now time.Time) bool {
	if i < 0 || i >= len(cands) {
		return false
	}
	c := cands[i]
	with := maps.Clone(failed)
	if with == nil {
		with = map[string]journal.FailedCall{}
	}
	with[c.Ref] = journal.FailedCall{At: now, Failure: journal.Failure{
		Class: journal.FailOverloaded, SecretVersion: c.SecretVersion, ConfigVersion: c.ConfigVersion}}
	sel := SelectCandidate(cands, with, now)
	return sel.Index >= 0 && sel.Index != i && sel.Block == nil
}

// stillFailing: a model's failure anywhere in the run counts until its
// Secret or the provider config changes; a rejected key or refused model
// only then, an outage also not after its cooldown.
func stillFailing(fc journal.FailedCall, c Candidate, now time.Time) bool {
	if fc.Failure.SecretVersion != c.SecretVersion || fc.Failure.ConfigVersion != c.ConfigVersion {
		return false
	}
	switch fc.Failure.Class {
	case journal.FailAuth, journal.FailForbidden:
		return true
	case journal.FailFatal:
		return false
	}
	return now.Before(fc.At.Add(retryAfter(fc.Failure.Class)))
}
