package helmchart_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartWebhooksAreConfigWebhooks: the chart's
// ValidatingWebhookConfiguration holds config/webhook's webhooks (rules,
// side effects, timeouts, paths), each calling the chart's webhook Service
// in the release namespace with the failurePolicy of values; the Service
// selects the manager's pods and targets their webhook port; the manager
// is told the names of that Service, that configuration and the
// certificate Secret, which are exactly the names its certificate RBAC
// grants (config/rbac/webhook_role.yaml's rules, with the release's names),
// bound to its ServiceAccount.
func TestChartWebhooksAreConfigWebhooks(t *testing.T) {
	k := kustomize(t, "default")
	kv := one[admissionregistrationv1.ValidatingWebhookConfiguration](t, k, "ValidatingWebhookConfiguration", "")
	for _, policy := range []string{"Fail", "Ignore"} {
		c := renderChart(t, map[string]any{"webhook": map[string]any{"failurePolicy": policy}}).objs
		cv := one[admissionregistrationv1.ValidatingWebhookConfiguration](t, c, "ValidatingWebhookConfiguration", "-webhook")
		svc := one[corev1.Service](t, c, "Service", "-webhook")
		d := one[appsv1.Deployment](t, c, "Deployment", "")
		pod := d.Spec.Template.Spec.Containers[0]
		args := flagValues(pod.Args)
		if args["webhook-bind-address"] != fmt.Sprintf(":%d", portOf(pod, "webhook")) || portOf(pod, "webhook") != 9443 {
			t.Errorf("--webhook-bind-address=%s, webhook port %d", args["webhook-bind-address"], portOf(pod, "webhook"))
		}
		if args["webhook-service"] != svc.Name || args["webhook-configuration"] != cv.Name || args["webhook-secret"] != releaseName+"-webhook-cert" {
			t.Errorf("the manager is told service %q configuration %q secret %q; the chart renders %s and %s", args["webhook-service"], args["webhook-configuration"], args["webhook-secret"], svc.Name, cv.Name)
		}
		if !selectsMap(svc.Spec.Selector, d.Spec.Template.Labels) || len(svc.Spec.Ports) != 1 || portOf(pod, svc.Spec.Ports[0].TargetPort.String()) != portOf(pod, "webhook") {
			t.Errorf("webhook Service selector %v ports %+v does not reach the pods' webhook port", svc.Spec.Selector, svc.Spec.Ports)
		}
		if len(cv.Webhooks) != len(kv.Webhooks) || len(cv.Webhooks) == 0 {
			t.Fatalf("the chart has %d webhooks, config/webhook %d", len(cv.Webhooks), len(kv.Webhooks))
		}
		for i := range kv.Webhooks {
			kw, cw := *kv.Webhooks[i].DeepCopy(), *cv.Webhooks[i].DeepCopy()
			s := cw.ClientConfig.Service
			if s == nil || s.Name != svc.Name || s.Namespace != releaseNS || s.Path == nil || *s.Path != *kw.ClientConfig.Service.Path ||
				s.Port == nil || *s.Port != svc.Spec.Ports[0].Port || cw.ClientConfig.URL != nil || len(cw.ClientConfig.CABundle) != 0 {
				t.Errorf("webhook %s calls %+v, want Service %s/%s port %d at config/webhook's path", cw.Name, cw.ClientConfig, releaseNS, svc.Name, svc.Spec.Ports[0].Port)
			}
			if cw.FailurePolicy == nil || string(*cw.FailurePolicy) != policy {
				t.Errorf("webhook %s failurePolicy %v, want %s", cw.Name, cw.FailurePolicy, policy)
			}
			kw.ClientConfig, cw.ClientConfig, kw.FailurePolicy = admissionregistrationv1.WebhookClientConfig{}, admissionregistrationv1.WebhookClientConfig{}, cw.FailurePolicy
			if !equality.Semantic.DeepEqual(kw, cw) {
				t.Errorf("the chart's webhook\n%+v\nconfig/webhook's\n%+v", cw, kw)
			}
		}
		checkWebhookRBAC(t, k, c, map[string]string{
			"agentrun-webhook-server-cert":              args["webhook-secret"],
			"agentrun-validating-webhook-configuration": cv.Name,
		})
	}
}

// checkWebhookRBAC: the chart's certificate Role and ClusterRole grant
// config/default's rules with the release's names (renamed: config's name
// to the chart's), bound to the chart's ServiceAccount.
func checkWebhookRBAC(t *testing.T, k, c []*unstructured.Unstructured, renamed map[string]string) {
	t.Helper()
	rename := func(rules []rbacv1.PolicyRule) []string {
		out := make([]rbacv1.PolicyRule, 0, len(rules))
		for _, r := range rules {
			r = *r.DeepCopy()
			for i, n := range r.ResourceNames {
				if to, ok := renamed[n]; ok {
					r.ResourceNames[i] = to
				} else {
					t.Errorf("config/rbac/webhook_role.yaml grants %s, which is none of the manager's default names %v", n, renamed)
				}
			}
			out = append(out, r)
		}
		return grants(out)
	}
	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: one[corev1.ServiceAccount](t, c, "ServiceAccount", "").Name, Namespace: releaseNS}}
	kr, cr := one[rbacv1.Role](t, k, "Role", "-webhook-cert-role"), one[rbacv1.Role](t, c, "Role", "-webhook-cert")
	if got, want := grants(cr.Rules), rename(kr.Rules); !slices.Equal(got, want) || cr.Namespace != releaseNS {
		t.Errorf("Role %s/%s grants %v, want config/rbac's %v in %s", cr.Namespace, cr.Name, got, want, releaseNS)
	}
	if b := one[rbacv1.RoleBinding](t, c, "RoleBinding", "-webhook-cert"); b.RoleRef.Name != cr.Name || !reflect.DeepEqual(b.Subjects, sa) {
		t.Errorf("RoleBinding %s binds %s to %v", b.Name, b.RoleRef.Name, b.Subjects)
	}
	kcr, ccr := one[rbacv1.ClusterRole](t, k, "ClusterRole", "-webhook-configuration-role"), one[rbacv1.ClusterRole](t, c, "ClusterRole", "-webhook-configuration")
	if got, want := grants(ccr.Rules), rename(kcr.Rules); !slices.Equal(got, want) {
		t.Errorf("ClusterRole %s grants %v, want config/rbac's %v", ccr.Name, got, want)
	}
	if b := one[rbacv1.ClusterRoleBinding](t, c, "ClusterRoleBinding", "-webhook-configuration"); b.RoleRef.Name != ccr.Name || !reflect.DeepEqual(b.Subjects, sa) {
		t.Errorf("ClusterRoleBinding %s binds %s to %v", b.Name, b.RoleRef.Name, b.Subjects)
	}
}

// flagValues maps --name=value arguments by name.
func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			out[name] = value
		}
	}
	return out
}

// TestChartWebhookCertManager: with webhook.certManager.enabled,
// cert-manager issues the certificate for the webhook Service's name into
// the Secret the manager mounts for --webhook-cert-dir, the webhook
// configuration asks the CA injector for its caBundle, and the manager
// holds no certificate RBAC.
func TestChartWebhookCertManager(t *testing.T) {
	objs := renderChart(t, mustYAML(t, `{webhook: {certManager: {enabled: true}}}`)).objs
	cert := one[certificate](t, objs, "Certificate", "-webhook")
	issuer := one[admissionPolicy](t, objs, "Issuer", "-webhook") // metadata and a spec, as the YAML says
	svc := one[corev1.Service](t, objs, "Service", "-webhook")
	vwc := one[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "-webhook")
	pod := one[appsv1.Deployment](t, objs, "Deployment", "").Spec.Template.Spec
	args := flagValues(pod.Containers[0].Args)
	if !slices.Equal(cert.Spec.DNSNames, []string{svc.Name + "." + releaseNS + ".svc"}) || cert.Spec.IssuerRef.Name != issuer.Name || cert.Namespace != releaseNS {
		t.Errorf("Certificate %s/%s for %v from %s, want the Service %s's name from Issuer %s", cert.Namespace, cert.Name, cert.Spec.DNSNames, cert.Spec.IssuerRef.Name, svc.Name, issuer.Name)
	}
	if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != releaseNS+"/"+cert.Name {
		t.Errorf("the webhook configuration's inject-ca-from is %q, want %s/%s", got, releaseNS, cert.Name)
	}
	mounted := ""
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath == args["webhook-cert-dir"] {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					mounted = v.Secret.SecretName
				}
			}
		}
	}
	if args["webhook-cert-dir"] == "" || mounted != cert.Spec.SecretName {
		t.Errorf("--webhook-cert-dir=%q mounts Secret %q, want the Certificate's %q", args["webhook-cert-dir"], mounted, cert.Spec.SecretName)
	}
	for _, f := range []string{"webhook-secret", "webhook-configuration"} {
		if _, ok := args[f]; ok {
			t.Errorf("the manager is passed --%s with cert-manager", f)
		}
	}
	for _, u := range objs {
		rbac := strings.HasSuffix(u.GetKind(), "Role") || strings.HasSuffix(u.GetKind(), "RoleBinding")
		if rbac && strings.Contains(u.GetName(), "webhook") {
			t.Errorf("with cert-manager the chart renders %s %s", u.GetKind(), u.GetName())
		}
	}
}

// certificate is the part of a cert-manager.io/v1 Certificate the chart sets.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName string         `json:"secretName"`
		DNSNames   []string       `json:"dnsNames"`
		PrivateKey map[string]any `json:"privateKey"`
		IssuerRef  struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"issuerRef"`
	} `json:"spec"`
}
