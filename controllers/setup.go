package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint"
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
	// secretVersion is the credentials Secret's resourceVersion ("" with none).
	secretVersion string
	credential    runstate.Credential
}

// resolveProvider reads the provider ConfigMap and the credentials Secret
// the next call needs, uncached (the manager caches only their metadata).
// A problem the cluster operator can fix comes back as a SetupBlock.
func (r *AgentRunReconciler) resolveProvider(ctx context.Context, run *arv1.AgentRun, stage *blueprint.Stage) (*resolved, *runstate.SetupBlock, error) {
	ns, cmName := run.Namespace, run.Spec.ProviderConfig
	if cmName == "" {
		cmName = providerconfig.DefaultConfigMapName
	}
	cmRef := []string{"ConfigMap/" + cmName}
	var cm corev1.ConfigMap
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: cmName}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &runstate.SetupBlock{
				Blocker: arv1.BlockerProviderConfigMissing, Refs: cmRef,
				Remedy: fmt.Sprintf("Create the provider ConfigMap %s/%s with a %s key declaring the providers: kubectl create configmap %s -n %s --from-file=%s",
					ns, cmName, providerconfig.DataKey, cmName, ns, providerconfig.DataKey),
			}, nil
		}
		return nil, nil, fmt.Errorf("reading provider config %s/%s: %w", ns, cmName, err)
	}
	cfg, err := providerconfig.Parse(cm.Data)
	if err != nil {
		return nil, &runstate.SetupBlock{
			Blocker: arv1.BlockerProviderConfigInvalid, Refs: cmRef,
			Remedy: fmt.Sprintf("Fix the provider ConfigMap %s/%s: %s", ns, cmName, truncate(err.Error(), 600)),
		}, nil
	}
	ref := run.Spec.Model
	if ref == "" && stage != nil && len(stage.Models) > 0 {
		ref = stage.Models[0].String()
	}
	p, model, ok := cfg.Resolve(ref)
	if !ok {
		want := ref
		if want == "" {
			want = "a default model"
		}
		return nil, &runstate.SetupBlock{
			Blocker: arv1.BlockerProviderMissing, Refs: cmRef,
			Remedy: fmt.Sprintf("No provider in ConfigMap %s/%s serves %s: declare it under [providers.<name>] (models = [...]) in %s.", ns, cmName, want, providerconfig.DataKey),
		}, nil
	}
	out := &resolved{config: cfg, provider: p, model: model, credential: runstate.Credential{Provider: p.Name, Namespace: ns}}
	if p.APIKeySecret == nil {
		return out, nil, nil
	}
	sref := p.APIKeySecret
	out.credential.Secret, out.credential.Key = sref.Name, sref.Key
	secRef := []string{"Secret/" + sref.Name}
	var sec corev1.Secret
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: sref.Name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &runstate.SetupBlock{
				Blocker: arv1.BlockerSecretMissing, Refs: secRef,
				Remedy: fmt.Sprintf("Create the Secret %s/%s holding provider %q's API key under key %q: kubectl create secret generic %s -n %s --from-literal=%s=<api key>",
					ns, sref.Name, p.Name, sref.Key, sref.Name, ns, sref.Key),
			}, nil
		}
		return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", ns, sref.Name, err)
	}
	key := strings.TrimSpace(string(sec.Data[sref.Key]))
	if key == "" {
		return nil, &runstate.SetupBlock{
			Blocker: arv1.BlockerSecretKeyMissing, Refs: secRef,
			Remedy: fmt.Sprintf("The Secret %s/%s has no non-empty key %q for provider %q: kubectl create secret generic %s -n %s --from-literal=%s=<api key> --dry-run=client -o yaml | kubectl apply -f -",
				ns, sref.Name, sref.Key, p.Name, sref.Name, ns, sref.Key),
		}, nil
	}
	out.apiKey = providers.Secret(key)
	out.secretVersion = sec.ResourceVersion
	return out, nil, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
