package helmchart_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// restricted evaluates the manager's pod template against the Pod Security
// "restricted" profile with the checks the API server's PodSecurity
// admission runs, and returns why it is not allowed ("" when it is).
func restricted(t *testing.T, vals map[string]any) string {
	t.Helper()
	d := one[appsv1.Deployment](t, renderChart(t, vals).objs, "Deployment", "")
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := policy.AggregateCheckResults(eval.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()},
		&d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec))
	if res.Allowed {
		return ""
	}
	return res.ForbiddenReason() + ": " + res.ForbiddenDetail()
}

// TestPodIsRestricted: the manager's pods meet Pod Security "restricted"
// with the default values and with the non-default ones of a production
// install, and each of the settings it rests on (non-root, no privilege
// escalation, every capability dropped, the RuntimeDefault seccomp profile)
// is one the evaluation refuses to do without.
func TestPodIsRestricted(t *testing.T) {
	if why := restricted(t, nil); why != "" {
		t.Errorf("the default pod is not restricted: %s", why)
	}
	if why := restricted(t, mustYAML(t, `{replicas: 3, shards: 6, resources: {limits: {cpu: "2"}}, env: [{name: GOGC, value: "75"}], extraArgs: [--max-concurrent-steps=64]}`)); why != "" {
		t.Errorf("the non-default pod is not restricted: %s", why)
	}
	for name, vals := range map[string]string{
		"privilege escalation": `{securityContext: {allowPrivilegeEscalation: true}}`,
		"a capability kept":    `{securityContext: {capabilities: {drop: [NET_RAW]}}}`,
		"no seccomp profile":   `{podSecurityContext: {seccompProfile: null}}`,
		"root allowed":         `{podSecurityContext: {runAsNonRoot: null}, securityContext: {runAsNonRoot: null}}`,
	} {
		if why := restricted(t, mustYAML(t, vals)); why == "" {
			t.Errorf("with %s (%s) the pod still passes as restricted", name, vals)
		} else {
			t.Logf("%s: %s", name, why)
		}
	}
}
