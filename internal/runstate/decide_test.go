package runstate

import (
	"reflect"
	"strings"
	"testing"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

var (
	now  = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	cred = Credential{Provider: "anthropic", Namespace: "team-a", Secret: "llm-keys", Key: "ANTHROPIC_API_KEY"}
)

// canary is a stand-in for a secret value. It is given to nothing, so a
// remedy that contains it has invented or leaked a value.
const canary = "sk-ant-CANARY-0123456789"

func interaction(unattended string) *journal.PendingInteraction {
	return &journal.PendingInteraction{
		Stage:  "plan",
		Point:  blueprint.InteractionPoint{Name: "approve-plan", Prompt: "Proceed with this plan?", Unattended: unattended, Style: blueprint.StyleConfirm},
		Target: "build",
	}
}

func pending() *journal.Entry {
	return &journal.Entry{Seq: 4, Kind: journal.ModelCallRequested, Stage: "plan", Provider: "anthropic", Model: "m"}
}

func failure(class journal.FailureClass, status int, version string) *journal.Failure {
	return &journal.Failure{Class: class, Status: status, Message: "provider said no", SecretVersion: version}
}

func ptrTime(t time.Time) *time.Time { return &t }

// running is a spawned, healthy run with nothing special going on.
func running() Facts {
	return Facts{
		Spawned: true,
		State:   journal.State{Stage: "plan", NextSeq: 3},
		Now:     now,
	}
}

func with(f Facts, mod func(*Facts)) Facts {
	mod(&f)
	return f
}

func TestDecide(t *testing.T) {
	setup := &SetupBlock{Blocker: arv1.BlockerSecretMissing, Remedy: "Create the Secret team-a/llm-keys", Refs: []string{"Secret/llm-keys"}}
	failedAt := now.Add(-time.Minute)

	cases := []struct {
		name  string
		facts Facts
		// want is compared in full, except Markers.Setup.Remedy, which is
		// checked by wantRemedy (substrings).
		want         Action
		wantRemedy   []string
		needProvider bool
	}{
		{
			name:  "terminal outcome does nothing",
			facts: with(running(), func(f *Facts) { f.State.Outcome = journal.OutcomeComplete; f.Cancel = true; f.Paused = true }),
			want:  Action{Kind: ActNone},
		},
		{
			name:  "error outcome does nothing even when not spawned",
			facts: Facts{State: journal.State{Outcome: journal.OutcomeError}, BlueprintError: "agent.toml line 1: bad", Cancel: true},
			want:  Action{Kind: ActNone},
		},
		{
			name:  "cancelled outcome does nothing",
			facts: with(running(), func(f *Facts) { f.State.Outcome = journal.OutcomeCancelled; f.State.Pending = pending() }),
			want:  Action{Kind: ActNone},
		},
		{
			name: "cancel beats everything else",
			facts: with(running(), func(f *Facts) {
				f.Cancel, f.Paused, f.InFlight, f.Yolo = true, true, true, true
				f.Setup = setup
				f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
				f.State.Pending = pending()
			}),
			want: Action{Kind: ActCancel},
		},
		{
			name:  "cancel before spawn",
			facts: Facts{Cancel: true, BlueprintError: "bad", Setup: setup, Now: now},
			want:  Action{Kind: ActCancel},
		},
		{
			name:  "not spawned with a blueprint error fails",
			facts: Facts{BlueprintError: "agent.toml line 3: unknown key \"x\"", Setup: setup, Paused: true, Now: now},
			want:  Action{Kind: ActFail, Message: "agent.toml line 3: unknown key \"x\""},
		},
		{
			name:  "not spawned with a setup problem parks on it",
			facts: Facts{Setup: setup, Paused: true, Now: now},
			want:  Action{Kind: ActPark, Markers: Markers{Setup: setup}},
		},
		{
			name:  "not spawned spawns",
			facts: Facts{Now: now},
			want:  Action{Kind: ActSpawn},
		},
		{
			name:  "not spawned spawns even when paused",
			facts: Facts{Paused: true, Now: now},
			want:  Action{Kind: ActSpawn},
		},
		{
			name: "paused holds",
			facts: with(running(), func(f *Facts) {
				f.Paused, f.Yolo = true, true
				f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
				f.Setup = setup
			}),
			want: Action{Kind: ActHold},
		},
		{
			name: "yolo answers an auto_approve point",
			facts: with(running(), func(f *Facts) {
				f.Yolo = true
				f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
				f.Setup = setup
				f.InFlight = true
			}),
			want: Action{Kind: ActAnswerInteraction},
		},
		{
			name: "yolo parks on an unattended=ask point",
			facts: with(running(), func(f *Facts) {
				f.Yolo = true
				f.State.Interaction = interaction(blueprint.UnattendedAsk)
				f.State.Apply(nil, journal.Entry{Kind: journal.QuestionAsked, Point: "approve-plan", At: now})
			}),
			want: Action{Kind: ActPark, Markers: Markers{InteractionPoint: &Question{Point: "approve-plan", Prompt: "Proceed with this plan?"}}},
		},
		{
			name: "a checkpoint is first journaled as asked",
			facts: with(running(), func(f *Facts) {
				f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
			}),
			want: Action{Kind: ActAsk, Ask: "approve-plan"},
		},
		{
			name: "attended run parks on an auto_approve point",
			facts: with(running(), func(f *Facts) {
				f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
				f.State.Apply(nil, journal.Entry{Kind: journal.QuestionAsked, Point: "approve-plan", At: now})
				f.Setup = setup
			}),
			want: Action{Kind: ActPark, Markers: Markers{InteractionPoint: &Question{Point: "approve-plan", Prompt: "Proceed with this plan?"}}},
		},
		{
			name:  "a call in flight: nothing to do",
			facts: with(running(), func(f *Facts) { f.InFlight = true; f.State.Pending = pending(); f.Setup = setup }),
			want:  Action{Kind: ActNone},
		},
		{
			name: "a call in flight held by a provider's limit: a healthy park, nothing to do",
			facts: with(running(), func(f *Facts) {
				f.InFlight, f.State.Pending = true, pending()
				f.RateLimited = &RateLimit{Provider: "openai", Model: "gpt-4o-mini", RetryAt: now.Add(3 * time.Second)}
			}),
			want: Action{Kind: ActPark, Markers: Markers{RateLimited: &RateLimit{Provider: "openai", Model: "gpt-4o-mini", RetryAt: now.Add(3 * time.Second)}}},
		},
		{
			name:         "setup problem parks",
			facts:        with(running(), func(f *Facts) { f.Setup = setup; f.State.Pending = pending() }),
			want:         Action{Kind: ActPark, Markers: Markers{Setup: setup}},
			needProvider: true,
		},
		{
			name:         "pending call not in flight is re-issued",
			facts:        with(running(), func(f *Facts) { f.State.Pending = pending(); f.State.Failure = failure(journal.FailAuth, 401, "v1") }),
			want:         Action{Kind: ActDispatch, Reissue: true},
			needProvider: true,
		},
		{
			name: "every model out of service parks with the retry time",
			facts: with(running(), func(f *Facts) {
				f.Setup, f.SetupRetryAt = setup, ptrTime(failedAt.Add(RetryCooldown))
			}),
			want:         Action{Kind: ActPark, RetryAt: ptrTime(failedAt.Add(RetryCooldown)), Markers: Markers{Setup: setup}},
			needProvider: true,
		},
		{
			name: "a quota with no room parks a due call (a reissue too) until its reset",
			facts: with(running(), func(f *Facts) {
				f.State.Pending = pending()
				f.Quota = &QuotaHit{Quota: "AgentRunQuota/team-a/daily", Resource: arv1.QuotaCost, Used: "1", Hard: "1", ResetAt: ptrTime(failedAt.Add(time.Hour))}
			}),
			want: Action{Kind: ActPark, RetryAt: ptrTime(failedAt.Add(time.Hour)),
				Markers: Markers{Quota: &QuotaHit{Quota: "AgentRunQuota/team-a/daily", Resource: arv1.QuotaCost, Used: "1", Hard: "1", ResetAt: ptrTime(failedAt.Add(time.Hour))}}},
			needProvider: true,
		},
		{
			name: "a setup problem comes before a quota",
			facts: with(running(), func(f *Facts) {
				f.Setup, f.Quota = setup, &QuotaHit{Quota: "AgentRunQuota/team-a/daily", Resource: arv1.QuotaCost, Used: "1", Hard: "1"}
			}),
			want:         Action{Kind: ActPark, Markers: Markers{Setup: setup}},
			needProvider: true,
		},
		{
			name:         "nothing special dispatches",
			facts:        running(),
			want:         Action{Kind: ActDispatch},
			needProvider: true,
		},
		{
			name: "yolo with nothing pending dispatches",
			facts: with(running(), func(f *Facts) {
				f.Yolo = true
				f.State.Iteration, f.State.ModelCalls = 3, 3
			}),
			want:         Action{Kind: ActDispatch},
			needProvider: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.facts)
			gotCmp := got
			if got.Markers.Setup != nil && tc.wantRemedy != nil {
				s := *got.Markers.Setup
				for _, sub := range tc.wantRemedy {
					if !strings.Contains(s.Remedy, sub) {
						t.Errorf("remedy %q does not contain %q", s.Remedy, sub)
					}
				}
				if strings.Contains(s.Remedy, canary) {
					t.Errorf("remedy %q contains a secret value", s.Remedy)
				}
				s.Remedy = ""
				gotCmp.Markers.Setup = &s
			}
			if !reflect.DeepEqual(gotCmp, tc.want) {
				t.Errorf("Decide = %s\nwant     %s", showAction(got), showAction(tc.want))
			}
			if np := NeedsProvider(tc.facts); np != tc.needProvider {
				t.Errorf("NeedsProvider = %v, want %v", np, tc.needProvider)
			}
		})
	}
}

func showAction(a Action) string {
	s := "{Kind:" + string(a.Kind)
	if a.Reissue {
		s += " Reissue"
	}
	if a.Message != "" {
		s += " Message:" + a.Message
	}
	if a.RetryAt != nil {
		s += " RetryAt:" + a.RetryAt.Format(time.RFC3339Nano)
	}
	if m := a.Markers.Setup; m != nil {
		s += " Setup:{" + string(m.Blocker) + " refs=" + strings.Join(m.Refs, ",") + " remedy=" + m.Remedy + "}"
	}
	if q := a.Markers.InteractionPoint; q != nil {
		s += " InteractionPoint:" + q.Point + "/" + q.Prompt
	}
	return s + "}"
}

// TestDecideIsPure: Decide does not change the facts it is given.
func TestDecideIsPure(t *testing.T) {
	f := with(running(), func(f *Facts) {
		f.State.Failure, f.State.FailureAt = failure(journal.FailCredits, 402, "v1"), now
	})
	before := f
	beforeFailure := *f.State.Failure
	a1, a2 := Decide(f), Decide(f)
	if !reflect.DeepEqual(a1, a2) {
		t.Errorf("Decide is not deterministic: %s vs %s", showAction(a1), showAction(a2))
	}
	if !reflect.DeepEqual(f, before) || *f.State.Failure != beforeFailure {
		t.Errorf("Decide modified its facts")
	}
}

func TestNeedsProvider(t *testing.T) {
	cases := []struct {
		name  string
		facts Facts
		want  bool
	}{
		{"not spawned", Facts{Now: now}, false},
		{"cancel", with(running(), func(f *Facts) { f.Cancel = true }), false},
		{"paused", with(running(), func(f *Facts) { f.Paused = true }), false},
		{"in flight", with(running(), func(f *Facts) { f.InFlight = true }), false},
		{"complete", with(running(), func(f *Facts) { f.State.Outcome = journal.OutcomeComplete }), false},
		{"error", with(running(), func(f *Facts) { f.State.Outcome = journal.OutcomeError }), false},
		{"cancelled", with(running(), func(f *Facts) { f.State.Outcome = journal.OutcomeCancelled }), false},
		{"interaction pending", with(running(), func(f *Facts) { f.State.Interaction = interaction(blueprint.UnattendedAutoApprove) }), false},
		{"yolo interaction pending", with(running(), func(f *Facts) {
			f.Yolo = true
			f.State.Interaction = interaction(blueprint.UnattendedAutoApprove)
		}), false},
		{"running", running(), true},
		{"pending re-issue", with(running(), func(f *Facts) { f.State.Pending = pending() }), true},
		{"parked on a failure", with(running(), func(f *Facts) { f.State.Failure = failure(journal.FailAuth, 401, "v1") }), true},
	}
	for _, tc := range cases {
		if got := NeedsProvider(tc.facts); got != tc.want {
			t.Errorf("%s: NeedsProvider = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestProviderRemedy(t *testing.T) {
	classes := []struct {
		class   journal.FailureClass
		status  int
		phrases []string
	}{
		{journal.FailAuth, 401, []string{"rejected the API key", "HTTP 401", "kubectl create secret generic llm-keys -n team-a --from-literal=ANTHROPIC_API_KEY=<key>"}},
		{journal.FailForbidden, 403, []string{"refused access", "HTTP 403", "kubectl create secret generic llm-keys -n team-a"}},
		{journal.FailCredits, 402, []string{"out of credits", RetryCooldown.String()}},
		{journal.FailUnreachable, 0, []string{"could not be reached", "dial tcp: connection refused", RetryCooldown.String()}},
		{journal.FailTimedOut, 0, []string{"timed out", RetryCooldown.String()}},
		{journal.FailFailed, 500, []string{"failed: dial tcp: connection refused", RetryCooldown.String()}},
		{journal.FailOverloaded, 529, []string{"overloaded", "overload_failover_seconds", RetryCooldown.String()}},
	}
	for _, tc := range classes {
		t.Run(string(tc.class), func(t *testing.T) {
			fl := &journal.Failure{Class: tc.class, Status: tc.status, Message: "dial tcp: connection refused", SecretVersion: "v1"}
			r := ProviderRemedy(fl, cred)
			for _, p := range append([]string{`provider "anthropic"`}, tc.phrases...) {
				if !strings.Contains(r, p) {
					t.Errorf("remedy %q does not contain %q", r, p)
				}
			}
			if strings.Contains(r, canary) {
				t.Errorf("remedy %q contains a secret value", r)
			}
			if len(r) > 1024 {
				t.Errorf("remedy is %d bytes, over status.waitingOn.remedy's 1024", len(r))
			}
			for _, p := range []string{"team-a/llm-keys", `"ANTHROPIC_API_KEY"`} {
				if !strings.Contains(r, p) {
					t.Errorf("remedy %q does not name the Secret: missing %q", r, p)
				}
			}
		})
	}
}

func TestProviderRemedyWithoutSecret(t *testing.T) {
	c := Credential{Provider: "ollama"}
	for _, class := range []journal.FailureClass{journal.FailAuth, journal.FailForbidden, journal.FailCredits, journal.FailUnreachable, journal.FailTimedOut, journal.FailFailed} {
		t.Run(string(class), func(t *testing.T) {
			r := ProviderRemedy(&journal.Failure{Class: class, Status: 401, Message: "m"}, c)
			if !strings.Contains(r, `provider "ollama"`) {
				t.Errorf("remedy %q does not name the provider", r)
			}
			if strings.Contains(r, "kubectl") {
				t.Errorf("remedy %q tells the operator to update a Secret though the provider uses none", r)
			}
			if strings.Contains(r, "Secret") {
				t.Errorf("remedy %q mentions a Secret though the provider uses none", r)
			}
		})
	}
}

func TestProviderRemedyBoundedLength(t *testing.T) {
	long := strings.Repeat("upstream error body ", 100) // 2000 bytes
	for _, class := range []journal.FailureClass{journal.FailUnreachable, journal.FailFailed, journal.FailEgressRefused} {
		r := ProviderRemedy(&journal.Failure{Class: class, Status: 502, Message: long}, cred)
		if len(r) > 1024 {
			t.Errorf("%s: remedy is %d bytes, want <= 1024", class, len(r))
		}
		if !strings.Contains(r, "upstream error body") {
			t.Errorf("%s: remedy lost the provider's message entirely", class)
		}
	}
}

// TestSelectCandidate covers failover: a model that failed here is skipped
// while its failure still counts (a rejected key until the Secret changes,
// an outage until the Secret changes or the cooldown ends), open circuits
// are skipped, and when nothing is left the run parks on the shared blocker.
func TestSelectCandidate(t *testing.T) {
	failedAt := now.Add(-time.Minute)
	a := Candidate{Ref: "anthropic/m", SecretVersion: "v1", Credential: cred}
	b := Candidate{Ref: "openai/g", SecretVersion: "o1", Credential: Credential{Provider: "openai", Namespace: "team-a", Secret: "oa", Key: "k"}}
	fail := func(class journal.FailureClass, status int, version string, at time.Time) journal.FailedCall {
		return journal.FailedCall{Failure: *failure(class, status, version), At: at}
	}
	open := now.Add(time.Minute)
	cases := []struct {
		name       string
		cands      []Candidate
		failed     map[string]journal.FailedCall
		wantIndex  int
		wantBlock  arv1.SetupBlocker
		wantRetry  *time.Time
		wantRemedy []string
	}{
		{name: "first candidate when nothing failed", cands: []Candidate{a, b}, wantIndex: 0},
		{name: "rejected key fails over to the next model", cands: []Candidate{a, b},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailAuth, 401, "v1", failedAt)}, wantIndex: 1},
		{name: "rejected key with the same Secret and no other model parks without a retry time", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailAuth, 401, "v1", failedAt.Add(-time.Hour))}, wantIndex: -1,
			wantBlock: arv1.BlockerAuthFailed, wantRemedy: []string{"team-a/llm-keys", `"ANTHROPIC_API_KEY"`, "HTTP 401"}},
		{name: "forbidden with the same Secret parks", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailForbidden, 403, "v1", failedAt)}, wantIndex: -1,
			wantBlock: arv1.BlockerForbidden, wantRemedy: []string{"HTTP 403"}},
		{name: "rejected key with a changed Secret is tried again", cands: []Candidate{{Ref: a.Ref, SecretVersion: "v2", Credential: cred}},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailAuth, 401, "v1", failedAt)}, wantIndex: 0},
		{name: "rejected key with a changed provider config is tried again", cands: []Candidate{{Ref: a.Ref, SecretVersion: "v1", ConfigVersion: "c2", Credential: cred}},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailAuth, 401, "v1", failedAt)}, wantIndex: 0},
		{name: "a failure under the same Secret and provider config still counts", cands: []Candidate{{Ref: a.Ref, SecretVersion: "v1", ConfigVersion: "c1", Credential: cred}, b},
			failed: map[string]journal.FailedCall{a.Ref: {Failure: journal.Failure{Class: journal.FailFailed, Status: 500, SecretVersion: "v1", ConfigVersion: "c1"}, At: failedAt}}, wantIndex: 1},
		{name: "no credits before the cooldown parks until it ends", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailCredits, 402, "v1", failedAt)}, wantIndex: -1,
			wantBlock: arv1.BlockerCreditsExhausted, wantRetry: ptrTime(failedAt.Add(RetryCooldown)), wantRemedy: []string{"out of credits"}},
		{name: "no credits exactly at the cooldown is tried again", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailCredits, 402, "v1", now.Add(-RetryCooldown))}, wantIndex: 0},
		{name: "no credits one nanosecond before the cooldown still parks", cands: []Candidate{a},
			failed:    map[string]journal.FailedCall{a.Ref: fail(journal.FailCredits, 402, "v1", now.Add(-RetryCooldown+time.Nanosecond))},
			wantIndex: -1, wantBlock: arv1.BlockerCreditsExhausted, wantRetry: ptrTime(now.Add(time.Nanosecond))},
		{name: "unreachable parks with its own blocker", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailUnreachable, 0, "v1", failedAt)}, wantIndex: -1,
			wantBlock: arv1.BlockerProviderUnreachable, wantRetry: ptrTime(failedAt.Add(RetryCooldown)), wantRemedy: []string{"could not be reached"}},
		{name: "an egress refusal parks with its own blocker and the refusal's remedy, retried sooner", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: {Failure: journal.Failure{Class: journal.FailEgressRefused, SecretVersion: "v1",
				Message: "egress refused: 169.254.169.254 for namespace team-a: cloud metadata service (rule metadata). 169.254.169.254 is a cloud metadata service"}, At: now.Add(-10 * time.Second)}},
			wantIndex: -1, wantBlock: arv1.BlockerEgressRefused, wantRetry: ptrTime(now.Add(-10 * time.Second).Add(EgressRetry)),
			wantRemedy: []string{"egress policy refused to connect to provider \"anthropic\"", "(rule metadata)", "retries every 30s"}},
		{name: "an egress refusal is tried again after EgressRetry", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailEgressRefused, 0, "v1", now.Add(-EgressRetry))}, wantIndex: 0},
		{name: "different reasons on every model park on ProvidersUnavailable", cands: []Candidate{a, b},
			failed: map[string]journal.FailedCall{
				a.Ref: fail(journal.FailAuth, 401, "v1", failedAt),
				b.Ref: fail(journal.FailCredits, 402, "o1", failedAt),
			}, wantIndex: -1, wantBlock: arv1.BlockerProvidersUnavailable, wantRetry: ptrTime(failedAt.Add(RetryCooldown))},
		{name: "an open circuit fails over", cands: []Candidate{{Ref: a.Ref, SecretVersion: "v1", Credential: cred, CircuitOpenUntil: &open, CircuitClass: "ProviderFailed"}, b},
			wantIndex: 1},
		{name: "an open circuit on the only model parks on its last reason until it closes",
			cands:     []Candidate{{Ref: a.Ref, SecretVersion: "v1", Credential: cred, CircuitOpenUntil: &open, CircuitClass: "CreditsExhausted"}},
			wantIndex: -1, wantBlock: arv1.BlockerCreditsExhausted, wantRetry: &open},
		{name: "an open circuit with no known reason parks on ProvidersUnavailable",
			cands:     []Candidate{{Ref: a.Ref, CircuitOpenUntil: &open}},
			wantIndex: -1, wantBlock: arv1.BlockerProvidersUnavailable, wantRetry: &open},
		{name: "the chosen candidate's setup problem parks the run", cands: []Candidate{{Ref: a.Ref, Block: &SetupBlock{Blocker: arv1.BlockerSecretMissing, Remedy: "create it"}}, b},
			wantIndex: 0, wantBlock: arv1.BlockerSecretMissing},
		{name: "a fatal failure does not hold a model back", cands: []Candidate{a},
			failed: map[string]journal.FailedCall{a.Ref: fail(journal.FailFatal, 400, "v1", failedAt)}, wantIndex: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SelectCandidate(c.cands, c.failed, now)
			if got.Index != c.wantIndex {
				t.Fatalf("index = %d, want %d (block %+v)", got.Index, c.wantIndex, got.Block)
			}
			switch {
			case c.wantBlock == "" && got.Block != nil:
				t.Fatalf("parks on %+v, want none", got.Block)
			case c.wantBlock != "" && (got.Block == nil || got.Block.Blocker != c.wantBlock):
				t.Fatalf("block = %+v, want %s", got.Block, c.wantBlock)
			}
			if (got.RetryAt == nil) != (c.wantRetry == nil) || (got.RetryAt != nil && !got.RetryAt.Equal(*c.wantRetry)) {
				t.Errorf("retryAt = %v, want %v", got.RetryAt, c.wantRetry)
			}
			for _, want := range c.wantRemedy {
				if !strings.Contains(got.Block.Remedy, want) {
					t.Errorf("remedy %q lacks %q", got.Block.Remedy, want)
				}
			}
			if got.Block != nil && len(got.Block.Remedy) > 1024 {
				t.Errorf("remedy is %d bytes, over the CRD's 1024", len(got.Block.Remedy))
			}
		})
	}
}

// TestCanFailOver: a chosen model may be given up on for overload only
// when another of the list would be called instead of the run parking.
func TestCanFailOver(t *testing.T) {
	a := Candidate{Ref: "anthropic/opus", SecretVersion: "v1", Credential: cred}
	b := Candidate{Ref: "anthropic/sonnet", SecretVersion: "v1", Credential: cred}
	later := now.Add(time.Minute)
	rejected := map[string]journal.FailedCall{b.Ref: {Failure: journal.Failure{Class: journal.FailAuth, Status: 401, SecretVersion: "v1"}, At: now}}
	cases := []struct {
		name   string
		cands  []Candidate
		failed map[string]journal.FailedCall
		want   bool
	}{
		{"alone", []Candidate{a}, nil, false},
		{"another model", []Candidate{a, b}, nil, true},
		{"another model that failed", []Candidate{a, b}, rejected, false},
		{"another model with a setup problem", []Candidate{a, {Ref: b.Ref, Block: &SetupBlock{Blocker: arv1.BlockerSecretMissing}}}, nil, false},
		{"another model whose circuit is open", []Candidate{a, {Ref: b.Ref, CircuitOpenUntil: &later}}, nil, false},
		{"an earlier model failing over to this one", []Candidate{b, a}, rejected, false},
	}
	for _, c := range cases {
		i := SelectCandidate(c.cands, c.failed, now).Index
		if got := CanFailOver(c.cands, i, c.failed, now); got != c.want {
			t.Errorf("%s: CanFailOver = %v, want %v", c.name, got, c.want)
		}
	}
}
