package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
	"github.com/agentrun-dev/agentrun-operator/internal/caches"
	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/providers"
	"github.com/agentrun-dev/agentrun-operator/internal/runstate"
)

// resolved is a provider ready for a call.
type resolved struct {
	config   *providerconfig.Config
	provider *providerconfig.Provider
	model    string
	apiKey   providers.Secret
	// secretVersion is the credentials Secret's resourceVersion ("" with
	// none), configVersion the provider ConfigMap's.
	secretVersion, configVersion string
	credential                   runstate.Credential
	// skipped are the stage's models failover passed over to reach this one.
	skipped []runstate.Skipped
	// canFailOver: another of the stage's models would be called should
	// this one fail (runstate.CanFailOver).
	canFailOver bool
}

// resolveProvider reads the provider ConfigMap and the credentials of each
// model the stage lists (uncached: the cache holds only their metadata),
// then picks the first that has not failed here and whose circuit is closed
// (runstate.SelectCandidate). A problem the cluster operator can fix comes
// back as a SetupBlock, with a retry time when waiting also helps.
func (r *AgentRunReconciler) resolveProvider(ctx context.Context, run *arv1.AgentRun, stage *blueprint.Stage, titleRefs []string, st journal.State, now time.Time) (*resolved, *runstate.SetupBlock, *time.Time, error) {
	cfg, cmName, cmVersion, block, err := r.providerConfig(ctx, run)
	if err != nil || block != nil {
		return nil, block, nil, err
	}
	refs := []string{run.Spec.Model}
	switch {
	case run.Spec.Model != "":
	case len(titleRefs) > 0:
		refs = titleRefs
	case stage != nil && len(stage.Models) > 0:
		refs = refs[:0]
		for _, m := range stage.Models {
			refs = append(refs, m.String())
		}
		if stage.AllowUserDefault {
			// The provider config's default model, once the stage's own
			// are out of service (model.allow_user_default).
			refs = append(refs, "")
		}
	}
	cands := make([]runstate.Candidate, len(refs))
	res := make([]*resolved, len(refs))
	for i, ref := range refs {
		p, model, ok := cfg.Resolve(ref)
		if !ok {
			want := ref
			if want == "" {
				want = "a default model"
			}
			cands[i] = runstate.Candidate{Ref: ref, Block: &runstate.SetupBlock{
				Blocker: arv1.BlockerProviderMissing, Refs: []string{"ConfigMap/" + cmName},
				Remedy: fmt.Sprintf("No provider in ConfigMap %s/%s serves %s: declare it under [providers.<name>] (models = [...]) in %s.", run.Namespace, cmName, want, providerconfig.DataKey),
			}}
			continue
		}
		rv, block, err := r.credentials(ctx, run, p)
		if err != nil {
			return nil, nil, nil, err
		}
		rv.config, rv.provider, rv.model, rv.configVersion = cfg, p, model, cmVersion
		res[i] = rv
		cands[i] = runstate.Candidate{Ref: p.Name + "/" + model, Block: block, SecretVersion: rv.secretVersion, ConfigVersion: cmVersion, Credential: rv.credential}
		if open, until, class := r.breakers.Open(breakerKey(run.Namespace, p.Name), now); open {
			cands[i].CircuitOpenUntil, cands[i].CircuitClass = &until, class
		}
	}
	sel := runstate.SelectCandidate(cands, st.Failed, now)
	if sel.Block != nil {
		// Editing the provider config (another model, another Secret) may
		// fix any of these, so the run waits on it too.
		withConfigRef(sel.Block, cmName)
		if sel.Index < 0 {
			return nil, sel.Block, sel.RetryAt, nil
		}
		return nil, sel.Block, nil, nil
	}
	res[sel.Index].skipped = sel.Skipped
	res[sel.Index].canFailOver = runstate.CanFailOver(cands, sel.Index, st.Failed, now)
	return res[sel.Index], nil, nil, nil
}

func withConfigRef(b *runstate.SetupBlock, cmName string) {
	ref := "ConfigMap/" + cmName
	for _, r := range b.Refs {
		if r == ref {
			return
		}
	}
	b.Refs = append(b.Refs, ref)
}

// breakerKey scopes a provider's circuit to its namespace's provider config.
func breakerKey(ns, provider string) string { return ns + "/" + provider }

// providerConfig reads and parses the run's provider ConfigMap (once per
// version of it), naming it and its resourceVersion.
func (r *AgentRunReconciler) providerConfig(ctx context.Context, run *arv1.AgentRun) (cfg *providerconfig.Config, cmName, version string, block *runstate.SetupBlock, err error) {
	ns := run.Namespace
	cmName = run.Spec.ProviderConfig
	if cmName == "" {
		cmName = providerconfig.DefaultConfigMapName
	}
	cmRef := []string{"ConfigMap/" + cmName}
	data, rv, found, err := r.refs.ConfigMap(ctx, ns, cmName)
	switch {
	case err != nil:
		return nil, cmName, "", nil, fmt.Errorf("reading provider config %s/%s: %w", ns, cmName, err)
	case !found:
		return nil, cmName, "", &runstate.SetupBlock{
			Blocker: arv1.BlockerProviderConfigMissing, Refs: cmRef,
			Remedy: fmt.Sprintf("Create the provider ConfigMap %s/%s with a %s key declaring the providers: kubectl create configmap %s -n %s --from-file=%s",
				ns, cmName, providerconfig.DataKey, cmName, ns, providerconfig.DataKey),
		}, nil
	}
	p, ok := r.refs.Parsed("ConfigMap", ns, cmName, rv)
	parsed, isParsed := p.(parsedConfig)
	if !ok || !isParsed {
		parsed.cfg, parsed.err = providerconfig.Parse(data)
		r.refs.Remember("ConfigMap", ns, cmName, rv, parsed)
	}
	if parsed.err != nil {
		return nil, cmName, "", &runstate.SetupBlock{
			Blocker: arv1.BlockerProviderConfigInvalid, Refs: cmRef,
			Remedy: fmt.Sprintf("Fix the provider ConfigMap %s/%s: %s", ns, cmName, clipTo(parsed.err.Error(), 600)),
		}, nil
	}
	return parsed.cfg, cmName, rv, nil, nil
}

// parsedConfig is a provider ConfigMap as parsed at one version.
type parsedConfig struct {
	cfg *providerconfig.Config
	err error
}

// credentials reads the provider's API key Secret, if it has one.
func (r *AgentRunReconciler) credentials(ctx context.Context, run *arv1.AgentRun, p *providerconfig.Provider) (*resolved, *runstate.SetupBlock, error) {
	ns := run.Namespace
	out := &resolved{credential: runstate.Credential{Provider: p.Name, Namespace: ns}}
	if p.APIKeySecret == nil {
		return out, nil, nil
	}
	sref := p.APIKeySecret
	out.credential.Secret, out.credential.Key = sref.Name, sref.Key
	key, rv, block, err := secretValue(ctx, r.refs, secretCredential{
		ns: ns, name: sref.Name, key: sref.Key, placeholder: "api key",
		holds: fmt.Sprintf("provider %q's API key", p.Name), owner: fmt.Sprintf("provider %q", p.Name),
	})
	if err != nil {
		return nil, nil, err
	}
	out.secretVersion = rv
	if block != nil {
		return out, block, nil
	}
	out.apiKey = providers.Secret(key)
	return out, nil, nil
}

// secretCredential names a credential kept in a Secret key, and how the
// remedies that ask for it speak of it.
type secretCredential struct {
	ns, name, key string
	// holds ("provider "x"'s API key") and owner ("provider "x"") name it
	// in remedies; placeholder is the value's stand-in in the kubectl line.
	holds, owner, placeholder string
}

// secretValue reads a credential: its trimmed value and the Secret's
// resourceVersion, or the NeedsSetup blocker a missing Secret or an empty
// key is, with the kubectl line that fixes it.
func secretValue(ctx context.Context, secrets *caches.Refs, c secretCredential) (string, string, *runstate.SetupBlock, error) {
	refs := []string{"Secret/" + c.name}
	data, rv, found, err := secrets.Secret(ctx, c.ns, c.name)
	switch {
	case err != nil:
		return "", "", nil, fmt.Errorf("reading Secret %s/%s: %w", c.ns, c.name, err)
	case !found:
		return "", "", &runstate.SetupBlock{Blocker: arv1.BlockerSecretMissing, Refs: refs, Remedy: fmt.Sprintf(
			"Create the Secret %s/%s holding %s under key %q: kubectl create secret generic %s -n %s --from-literal=%s=<%s>",
			c.ns, c.name, c.holds, c.key, c.name, c.ns, c.key, c.placeholder)}, nil
	}
	v := strings.TrimSpace(string(data[c.key]))
	if v == "" {
		return "", rv, &runstate.SetupBlock{Blocker: arv1.BlockerSecretKeyMissing, Refs: refs, Remedy: fmt.Sprintf(
			"The Secret %s/%s has no non-empty key %q for %s: kubectl create secret generic %s -n %s --from-literal=%s=<%s> --dry-run=client -o yaml | kubectl apply -f -",
			c.ns, c.name, c.key, c.owner, c.name, c.ns, c.key, c.placeholder)}, nil
	}
	return v, rv, nil, nil
}
