package runstate

import (
	"fmt"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
)

// ActionKind is what the controller does next for a run.
type ActionKind string

// Actions.
const (
	// ActNone: nothing to do now (finished, or a step is in flight).
	ActNone ActionKind = "None"
	// ActSpawn: snapshot the blueprint and start the run.
	ActSpawn ActionKind = "Spawn"
	// ActFail: the run cannot start (the blueprint does not parse).
	ActFail ActionKind = "Fail"
	// ActCancel: record the cancellation and stop in-flight work.
	ActCancel ActionKind = "Cancel"
	// ActHold: paused; start nothing new.
	ActHold ActionKind = "Hold"
	// ActPark: wait; Markers say on what.
	ActPark ActionKind = "Park"
	// ActAnswerInteraction: approve the pending interaction point by policy
	// (an unattended run and an auto_approve point).
	ActAnswerInteraction ActionKind = "AnswerInteraction"
	// ActDispatch: issue the next model call (or re-issue the pending one).
	ActDispatch ActionKind = "Dispatch"
)

// Facts are everything Decide looks at. The controller gathers them; Decide
// does no I/O.
type Facts struct {
	// Spawned: the blueprint snapshot exists.
	Spawned bool
	// BlueprintError is a parse error of the blueprint at spawn.
	BlueprintError string
	// Blueprint is the snapshotted blueprint (nil before spawn).
	Blueprint *blueprint.Blueprint
	State     journal.State

	Cancel bool
	Paused bool
	Yolo   bool

	// InFlight: the executor is running the pending call.
	InFlight bool
	// Setup is a setup problem found for the next call, if any. Nil when the
	// provider is ready (or when no call is due).
	Setup *SetupBlock
	// SecretVersion is the resourceVersion of the credentials Secret the
	// next call would use ("" when it uses none).
	SecretVersion string
	// Credential names where the next call's key comes from, for remedies.
	Credential Credential
	Now        time.Time
}

// Credential names a provider and the Secret key it authenticates with.
type Credential struct {
	Provider  string
	Namespace string
	Secret    string
	Key       string
}

// RetryCooldown is how long a run parked on a provider outage (not on a
// rejected key) waits before trying again by itself: the seeds' circuit
// cooldown. Fixing the Secret retries at once.
const RetryCooldown = 300 * time.Second

// Action is Decide's answer.
type Action struct {
	Kind    ActionKind
	Markers Markers
	// Reissue: dispatch the pending call again under its seq (it was never
	// completed, e.g. after a restart) instead of writing a new intent.
	Reissue bool
	// Message explains ActFail.
	Message string
	// RetryAt, when set, is when a parked run should be looked at again.
	RetryAt *time.Time
}

// NeedsProvider reports whether Decide would want to dispatch a call, so the
// controller resolves the provider (and its Secret) only then.
func NeedsProvider(f Facts) bool {
	if !f.Spawned || f.Cancel || f.Paused || f.InFlight {
		return false
	}
	st := f.State
	return st.Outcome == journal.OutcomeNone && st.Interaction == nil
}

// Decide picks the run's next action from the recorded facts.
func Decide(f Facts) Action {
	switch {
	case f.State.Outcome != journal.OutcomeNone:
		return Action{Kind: ActNone}
	case f.Cancel:
		return Action{Kind: ActCancel}
	case !f.Spawned:
		if f.BlueprintError != "" {
			return Action{Kind: ActFail, Message: f.BlueprintError}
		}
		if f.Setup != nil {
			return Action{Kind: ActPark, Markers: Markers{Setup: f.Setup}}
		}
		return Action{Kind: ActSpawn}
	case f.Paused:
		return Action{Kind: ActHold}
	}
	st := f.State
	if in := st.Interaction; in != nil {
		if f.Yolo && in.Point.Unattended != blueprint.UnattendedAsk {
			return Action{Kind: ActAnswerInteraction}
		}
		return Action{Kind: ActPark, Markers: Markers{InteractionPoint: &Question{Point: in.Point.Name, Prompt: in.Point.Prompt}}}
	}
	if f.InFlight {
		return Action{Kind: ActNone}
	}
	if f.Setup != nil {
		return Action{Kind: ActPark, Markers: Markers{Setup: f.Setup}}
	}
	if st.Pending != nil {
		return Action{Kind: ActDispatch, Reissue: true}
	}
	if fl := st.Failure; fl != nil && fl.SecretVersion == f.SecretVersion {
		// The provider answered that this credential cannot be used, and the
		// Secret has not changed since: retrying at once would only repeat
		// the answer. A rejected key waits for the Secret to change; an
		// outage is also retried after the cooldown.
		park := Action{Kind: ActPark, Markers: Markers{Setup: &SetupBlock{
			Blocker: arv1.SetupBlocker(fl.Class),
			Remedy:  ProviderRemedy(fl, f.Credential),
			Refs:    credentialRefs(f.Credential),
		}}}
		if fl.Class != journal.FailAuth && fl.Class != journal.FailForbidden {
			at := st.FailureAt.Add(RetryCooldown)
			if !f.Now.Before(at) {
				return Action{Kind: ActDispatch}
			}
			park.RetryAt = &at
		}
		return park
	}
	return Action{Kind: ActDispatch}
}

func credentialRefs(c Credential) []string {
	if c.Secret == "" {
		return nil
	}
	return []string{"Secret/" + c.Secret}
}

// ProviderRemedy is the sentence for a run parked on a provider's answer.
// It names the Secret and key, never their value.
func ProviderRemedy(fl *journal.Failure, c Credential) string {
	where := fmt.Sprintf("provider %q", c.Provider)
	secret := ""
	if c.Secret != "" {
		secret = fmt.Sprintf(" Secret %s/%s key %q", c.Namespace, c.Secret, c.Key)
	}
	update := ""
	if c.Secret != "" {
		update = fmt.Sprintf(" Then update the Secret (kubectl create secret generic %s -n %s --from-literal=%s=<key> --dry-run=client -o yaml | kubectl apply -f -) and the run continues.", c.Secret, c.Namespace, c.Key)
	}
	switch fl.Class {
	case journal.FailAuth:
		return fmt.Sprintf("The %s rejected the API key in%s (HTTP %d). Put a valid key there:%s", where, secret, fl.Status, update)
	case journal.FailForbidden:
		return fmt.Sprintf("The %s accepted the key in%s but refused access to the model (HTTP %d). Grant the key access or choose another model.%s", where, secret, fl.Status, update)
	case journal.FailCredits:
		return fmt.Sprintf("The %s reports the account behind%s is out of credits or quota. Add credits; the run retries every %s, or at once when the Secret changes.", where, secret, RetryCooldown)
	case journal.FailUnreachable:
		return fmt.Sprintf("The %s could not be reached (%s). Check its base URL and the network; the run retries every %s.", where, fl.Message, RetryCooldown)
	case journal.FailTimedOut:
		return fmt.Sprintf("The %s timed out. The run retries every %s.", where, RetryCooldown)
	default:
		return fmt.Sprintf("The %s failed: %s. The run retries every %s.", where, fl.Message, RetryCooldown)
	}
}
