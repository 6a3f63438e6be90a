package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/egress"
	"github.com/agentrun-dev/agentrun-operator/internal/providerconfig"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
)

// `kubectl agentrun check`: is the install sound, and has a namespace what
// its runs need? One line per thing checked: OK, FIX (what is wrong and how
// to fix it) or SKIP (the user may not read it: RBAC). Exit 1 when
// anything needs fixing. It reads only; a Secret is read to see that its
// key is there, and no value is ever printed.

// expectedCRDs are the resources of this build's install: the runs and
// answers the plugin reads and writes, and the schedules, tool policies
// and quotas the manager reads, each served and stored at arv1.GroupVersion (a test compares them
// with config/crd/bases).
var expectedCRDs = []struct{ plural, kind string }{
	{"agentruns", "AgentRun"},
	{"agentrunanswers", "AgentRunAnswer"},
	{"agentrunschedules", "AgentRunSchedule"},
	{"agenttoolpolicies", "AgentToolPolicy"},
	{"clusteragenttoolpolicies", "ClusterAgentToolPolicy"},
	{"agentrunquotas", "AgentRunQuota"},
	{"clusteragentrunquotas", "ClusterAgentRunQuota"},
}

// managerLabel is the label of the manager's pods, in the kustomize
// install and the chart alike.
const managerLabel, managerLabelValue = "control-plane", "controller-manager"

// leaderElectionID is the manager's leader-election Lease
// (internal/manager).
const leaderElectionID = "agentrun-operator.agentrun.dev"

// errFix is a check that printed something to fix: exit 1, the lines say
// why.
var errFix = errors.New("the install needs fixing")

type checker struct {
	ctx  context.Context
	c    client.Client
	disc discovery.DiscoveryInterface
	w    io.Writer
	now  time.Time
	// opNS is where the manager runs (--operator-namespace).
	opNS string
	// manager is what its Deployment says (nil when it could not be read).
	manager           *managerArgs
	oks, fixes, skips int
}

func (k *checker) ok(format string, a ...any) {
	k.oks++
	fmt.Fprintf(k.w, "OK    %s\n", fmt.Sprintf(format, a...))
}

func (k *checker) fix(format string, a ...any) {
	k.fixes++
	fmt.Fprintf(k.w, "FIX   %s\n", fmt.Sprintf(format, a...))
}

// refused prints a SKIP line when err is the API server refusing the user
// (RBAC) and reports whether it did; any other error is the caller's.
func (k *checker) refused(what string, err error) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	k.skips++
	fmt.Fprintf(k.w, "SKIP  %s: cannot check, %s\n", what, statusMessage(err))
	return true
}

// statusMessage is the API server's own sentence for err.
func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}

func (a *app) check(ctx context.Context, c client.Client, _ string, o options) error {
	disc, err := discovery.NewDiscoveryClientForConfig(a.cfg)
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	k := &checker{ctx: ctx, c: c, disc: disc, w: a.stdout, now: a.now(), opNS: o.operatorNamespace}
	if k.opNS == "" {
		k.opNS = defaultLeaseNamespace
	}
	for _, step := range []func() error{k.crds, k.admission, k.deployment, k.leases, k.egress} {
		if err := step(); err != nil {
			return err
		}
	}
	var namespaces []string
	switch {
	case o.allNamespaces:
		if namespaces, err = k.namespacesWithRuns(); err != nil {
			return err
		}
	case a.flags.Namespace != nil && *a.flags.Namespace != "":
		namespaces = []string{*a.flags.Namespace}
	}
	for _, ns := range namespaces {
		if err := k.namespace(ns, !o.allNamespaces); err != nil {
			return err
		}
	}
	summary := fmt.Sprintf("%d OK", k.oks)
	if k.fixes > 0 {
		summary = fmt.Sprintf("%d to fix, %s", k.fixes, summary)
	}
	if k.skips > 0 {
		summary += fmt.Sprintf(", %d not checked (RBAC)", k.skips)
	}
	if !o.allNamespaces && len(namespaces) == 0 {
		summary += "; -n NAMESPACE or -A also checks what runs need"
	}
	fmt.Fprintf(a.stdout, "\n%s\n", summary)
	if k.fixes > 0 {
		return errFix
	}
	return nil
}

// crds: each CRD this plugin needs is installed, established, and serves
// and stores the version it speaks. Without the right to read CRDs,
// discovery (open to every authenticated user) still tells what is served.
func (k *checker) crds() error {
	group, version := arv1.GroupVersion.Group, arv1.GroupVersion.Version
	for _, want := range expectedCRDs {
		name := want.plural + "." + group
		var crd apiextensionsv1.CustomResourceDefinition
		err := k.c.Get(k.ctx, types.NamespacedName{Name: name}, &crd)
		switch {
		case apierrors.IsNotFound(err):
			k.fix("CRD %s is not installed: kubectl apply -k config/crd (or install the chart)", name)
			continue
		case apierrors.IsForbidden(err):
			if err := k.servedByDiscovery(name, want.plural); err != nil {
				return err
			}
			continue
		case err != nil:
			return fmt.Errorf("reading CRD %s: %w", name, err)
		}
		var served []string
		storage := ""
		for _, v := range crd.Spec.Versions {
			if v.Served {
				served = append(served, v.Name)
			}
			if v.Storage {
				storage = v.Name
			}
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		switch {
		case !slices.Contains(served, version) || storage != version:
			k.fix("CRD %s serves %s and stores %s; this plugin speaks %s/%s: apply the CRDs of this release (kubectl apply -k config/crd), or use the plugin of the installed release",
				name, orNone(served), orNone([]string{storage}), group, version)
		case !established:
			k.fix("CRD %s is not Established yet: kubectl describe crd %s", name, name)
		default:
			k.ok("CRD %s: %s served and stored, as this plugin expects", name, version)
		}
	}
	return nil
}

// servedByDiscovery checks through discovery that the resource is served.
func (k *checker) servedByDiscovery(name, plural string) error {
	list, err := k.disc.ServerResourcesForGroupVersion(arv1.GroupVersion.String())
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("discovering %s: %w", arv1.GroupVersion, err)
	}
	if list != nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
		k.ok("CRD %s: %s served (seen through discovery; reading CRDs, and so the storage version, is not granted to you)", name, arv1.GroupVersion.Version)
		return nil
	}
	k.fix("%s is not served by the API server: install the CRDs (kubectl apply -k config/crd, or the chart)", plural+"."+arv1.GroupVersion.String())
	return nil
}

func orNone(s []string) string {
	s = slices.DeleteFunc(slices.Clone(s), func(v string) bool { return v == "" })
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// admission: a ValidatingAdmissionPolicy checks who creates an
// AgentRunAnswer (config/admission), and a binding enforces it (Deny).
func (k *checker) admission() error {
	var policies admissionv1.ValidatingAdmissionPolicyList
	err := k.c.List(k.ctx, &policies)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		k.fix("the API server does not serve ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.30 or newer), so nothing checks who signs an answer")
		return nil
	case k.refused("answer admission policy", err):
		return nil
	case err != nil:
		return fmt.Errorf("listing ValidatingAdmissionPolicies: %w", err)
	}
	var names []string
	for _, p := range policies.Items {
		if coversAnswerCreate(p.Spec.MatchConstraints) {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		k.fix("no ValidatingAdmissionPolicy checks the AgentRunAnswers created (spec.by must be their creator): kubectl apply -k config/admission (or install the chart)")
		return nil
	}
	var bindings admissionv1.ValidatingAdmissionPolicyBindingList
	err = k.c.List(k.ctx, &bindings)
	switch {
	case k.refused("answer admission policy binding", err):
		return nil
	case err != nil:
		return fmt.Errorf("listing ValidatingAdmissionPolicyBindings: %w", err)
	}
	for _, b := range bindings.Items {
		if slices.Contains(names, b.Spec.PolicyName) && slices.Contains(b.Spec.ValidationActions, admissionv1.Deny) {
			k.ok("admission policy %s, bound by %s (Deny): an answer is signed by the user who creates it", b.Spec.PolicyName, b.Name)
			return nil
		}
	}
	k.fix("ValidatingAdmissionPolicy %s has no binding that denies (validationActions: [Deny]): kubectl apply -k config/admission (or install the chart)", strings.Join(names, ", "))
	return nil
}

// coversAnswerCreate: the constraints match creating agentrunanswers.
func coversAnswerCreate(m *admissionv1.MatchResources) bool {
	if m == nil {
		return false
	}
	for _, r := range m.ResourceRules {
		if (slices.Contains(r.APIGroups, arv1.GroupVersion.Group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, "agentrunanswers") || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Operations, admissionv1.Create) || slices.Contains(r.Operations, admissionv1.OperationAll)) {
			return true
		}
	}
	return false
}

// managerArgs is what the manager Deployment's arguments say about Leases
// and egress.
type managerArgs struct {
	name            string
	replicas        int32
	shards          int
	leaderElect     bool
	leaseNamespace  string
	egressFlags     []string
	egressConfigMap types.NamespacedName
}

// deployment: the manager's Deployment has every replica ready.
func (k *checker) deployment() error {
	var list appsv1.DeploymentList
	err := k.c.List(k.ctx, &list, client.InNamespace(k.opNS))
	switch {
	case k.refused("manager Deployment in "+k.opNS, err):
		return nil
	case err != nil:
		return fmt.Errorf("listing Deployments in %s: %w", k.opNS, err)
	}
	var d *appsv1.Deployment
	for i := range list.Items {
		if list.Items[i].Spec.Template.Labels[managerLabel] == managerLabelValue {
			d = &list.Items[i]
			break
		}
	}
	if d == nil {
		k.fix("no manager Deployment (pods labelled %s=%s) in namespace %s: install the operator, or name its namespace with --operator-namespace",
			managerLabel, managerLabelValue, k.opNS)
		return nil
	}
	m := parseManagerArgs(d, k.opNS)
	k.manager = m
	ready := d.Status.ReadyReplicas
	switch {
	case m.replicas == 0:
		k.fix("Deployment %s/%s is scaled to 0 replicas: no run is driven; kubectl scale deployment %s -n %s --replicas=2", k.opNS, d.Name, d.Name, k.opNS)
	case ready < m.replicas:
		k.fix("Deployment %s/%s: %d of %d replicas ready: kubectl describe deployment %s -n %s; kubectl logs -n %s deployment/%s",
			k.opNS, d.Name, ready, m.replicas, d.Name, k.opNS, k.opNS, d.Name)
	default:
		k.ok("Deployment %s/%s: %d of %d replicas ready", k.opNS, d.Name, ready, m.replicas)
	}
	if m.replicas > 1 && m.shards <= 1 && !m.leaderElect {
		k.fix("Deployment %s/%s runs %d replicas with --shards=1 and no --leader-elect: every replica drives every run; add --leader-elect or --shards", k.opNS, d.Name, m.replicas)
	}
	return nil
}

// parseManagerArgs reads the manager container's flags (both --f=v and
// --f v spellings, one or two dashes, as Go's flag package takes them).
func parseManagerArgs(d *appsv1.Deployment, ns string) *managerArgs {
	m := &managerArgs{name: d.Name, replicas: 1, shards: 1, leaseNamespace: ns,
		egressConfigMap: types.NamespacedName{Namespace: ns, Name: egress.DefaultConfigMapName}}
	if d.Spec.Replicas != nil {
		m.replicas = *d.Spec.Replicas
	}
	var args []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" || len(d.Spec.Template.Spec.Containers) == 1 {
			args = c.Args
		}
	}
	egressNames := []string{egress.FlagAllowCIDR, egress.FlagDenyCIDR, egress.FlagAllowHost, egress.FlagDenyHost}
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		next := func() string {
			if hasValue || i+1 >= len(args) {
				return value
			}
			i++
			return args[i]
		}
		switch {
		case name == "shards":
			if n, err := strconv.Atoi(next()); err == nil {
				m.shards = n
			}
		case name == "leader-elect":
			m.leaderElect = !hasValue || value == "true"
		case name == "lease-namespace":
			if v := next(); v != "" {
				m.leaseNamespace = v
			}
		case name == "egress-configmap":
			m.egressConfigMap.Name = next()
		case name == "egress-configmap-namespace":
			m.egressConfigMap.Namespace = next()
		case slices.Contains(egressNames, name):
			m.egressFlags = append(m.egressFlags, "--"+name+"="+next())
		}
	}
	return m
}

// leases: every shard has a Lease whose holder renewed it in time; with
// one shard and --leader-elect, the leader's Lease. A Lease held past its
// duration means the replica holding it is gone and nobody took it over.
func (k *checker) leases() error {
	ns, want := k.opNS, 0
	if m := k.manager; m != nil {
		ns = m.leaseNamespace
		if m.shards > 1 {
			want = m.shards
		} else if !m.leaderElect {
			k.ok("not sharded (--shards=1, no --leader-elect): the one replica drives every run; no Lease to check")
			return nil
		}
	}
	var list coordinationv1.LeaseList
	err := k.c.List(k.ctx, &list, client.InNamespace(ns))
	switch {
	case k.refused("Leases in "+ns, err):
		return nil
	case err != nil:
		return fmt.Errorf("listing Leases in %s: %w", ns, err)
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	if k.manager == nil { // the Deployment is unreadable: check the shard Leases there are
		for _, l := range list.Items {
			if n, err := strconv.Atoi(l.Labels[shards.LabelShard]); err == nil && l.Labels[shards.LabelLease] == "shard" && n+1 > want {
				want = n + 1
			}
		}
		if want == 0 {
			want = -1 // nothing to go by: the leader's Lease, if any
		}
	}
	if want > 0 {
		for i := range want {
			k.lease(ns, shards.LeaseName(i), fmt.Sprintf("shard %d", i), byName[shards.LeaseName(i)])
		}
		return nil
	}
	l := byName[leaderElectionID]
	if l == nil && k.manager == nil {
		k.ok("no shard or leader Lease in %s (the manager's Deployment could not be read to say whether one is due)", ns)
		return nil
	}
	k.lease(ns, leaderElectionID, "leader election", l)
	return nil
}

func (k *checker) lease(ns, name, what string, l *coordinationv1.Lease) {
	if l == nil {
		k.fix("%s: no Lease %s/%s, so no replica drives it: is the manager running? kubectl logs -n %s deployment/%s", what, ns, name, k.opNS, k.managerName())
		return
	}
	s := l.Spec
	holder := ""
	if s.HolderIdentity != nil {
		holder = *s.HolderIdentity
	}
	if holder == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		k.fix("%s: Lease %s/%s is held by nobody: no replica drives it; kubectl logs -n %s deployment/%s", what, ns, name, k.opNS, k.managerName())
		return
	}
	expires := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
	if !k.now.Before(expires) {
		k.fix("%s: Lease %s/%s held by %s expired %s ago (renewed %s ago, for %ds): that replica is gone and no live one took it over; kubectl get pods -n %s -l %s=%s; kubectl logs -n %s deployment/%s",
			what, ns, name, holder, since(k.now.Sub(expires)), since(k.now.Sub(s.RenewTime.Time)), *s.LeaseDurationSeconds,
			k.opNS, managerLabel, managerLabelValue, k.opNS, k.managerName())
		return
	}
	k.ok("%s: Lease %s/%s held by %s, renewed %s ago", what, ns, name, holder, since(k.now.Sub(s.RenewTime.Time)))
}

func (k *checker) managerName() string {
	if k.manager != nil {
		return k.manager.name
	}
	return "<manager>"
}

func since(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Truncate(time.Second).String()
}

// egress: the policy the manager enforces: its --egress-* flags merged
// with the egress ConfigMap, which must parse (a manager restarting with
// one that does not refuses to start).
func (k *checker) egress() error {
	if k.manager == nil {
		k.skips++
		fmt.Fprintf(k.w, "SKIP  egress policy: cannot check, the manager's Deployment (its --egress-* flags) could not be read\n")
		return nil
	}
	fs := flag.NewFlagSet("egress", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var flags egress.Config
	egress.BindFlags(fs, &flags)
	if err := fs.Parse(k.manager.egressFlags); err != nil {
		k.fix("the manager's egress flags do not parse (%v): fix the Deployment's --egress-* arguments", err)
		return nil
	}
	from := "the manager's flags"
	if len(k.manager.egressFlags) == 0 {
		from = "no --egress-* flags"
	}
	cfg := &flags
	ref := k.manager.egressConfigMap
	if ref.Name != "" {
		var cm corev1.ConfigMap
		err := k.c.Get(k.ctx, ref, &cm)
		switch {
		case apierrors.IsNotFound(err):
			from += fmt.Sprintf(", no ConfigMap %s", ref)
		case k.refused("egress ConfigMap "+ref.String(), err):
			return nil
		case err != nil:
			return fmt.Errorf("reading the egress ConfigMap %s: %w", ref, err)
		default:
			parsed, err := egress.ParseConfigMap(cm.Data)
			if err != nil {
				k.fix("egress ConfigMap %s does not parse: %v (the manager keeps the policy it last read, and would not start with this one)", ref, err)
				return nil
			}
			from += fmt.Sprintf(", ConfigMap %s", ref)
			cfg = egress.Merge(&flags, parsed)
		}
	}
	if err := cfg.Validate(); err != nil {
		k.fix("the egress policy is invalid: %v", err)
		return nil
	}
	k.ok("egress policy (%s): %s", from, describeEgress(cfg))
	return nil
}

// describeEgress is one line of what cfg changes from the default policy.
func describeEgress(c *egress.Config) string {
	var parts []string
	list := func(name string, items []string) {
		if len(items) > 0 {
			parts = append(parts, name+" "+strings.Join(items, ","))
		}
	}
	prefixes := func(ps []netip.Prefix) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.String()
		}
		return out
	}
	list("allow_cidrs", prefixes(c.AllowCIDRs))
	list("deny_cidrs", prefixes(c.DenyCIDRs))
	list("allow_hosts (allowlist mode)", c.AllowHosts)
	list("deny_hosts", c.DenyHosts)
	if len(c.Namespaces) > 0 {
		ns := make([]string, 0, len(c.Namespaces))
		for n := range c.Namespaces {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		list("exceptions for namespaces", ns)
	}
	if len(parts) == 0 {
		return "the default policy (metadata, loopback, link-local, the API server and the manager pod refused; docs/egress.md)"
	}
	return "the default policy with " + strings.Join(parts, "; ")
}

// namespacesWithRuns lists the namespaces holding unfinished runs.
func (k *checker) namespacesWithRuns() ([]string, error) {
	var runs arv1.AgentRunList
	err := k.c.List(k.ctx, &runs)
	switch {
	case k.refused("runs in every namespace", err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	seen := map[string]bool{}
	for _, r := range runs.Items {
		if !r.Status.Phase.IsTerminal() {
			seen[r.Namespace] = true
		}
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	if len(out) == 0 {
		k.ok("no unfinished run in any namespace: no provider config to check")
	}
	return out, nil
}

// namespace: the provider configs the namespace's unfinished runs use (and
// the default one, when asked about this namespace by name) exist and
// parse, the Secrets they name hold their keys, and no run waits on setup.
func (k *checker) namespace(ns string, withDefault bool) error {
	var runs arv1.AgentRunList
	err := k.c.List(k.ctx, &runs, client.InNamespace(ns))
	switch {
	case k.refused("runs in "+ns, err):
		return nil
	case err != nil:
		return fmt.Errorf("listing runs in %s: %w", ns, err)
	}
	users := map[string][]string{} // provider config -> the runs using it
	if withDefault {
		users[providerconfig.DefaultConfigMapName] = nil
	}
	for _, r := range runs.Items {
		if r.Status.Phase.IsTerminal() {
			continue
		}
		name := r.Spec.ProviderConfig
		if name == "" {
			name = providerconfig.DefaultConfigMapName
		}
		users[name] = append(users[name], r.Name)
	}
	names := make([]string, 0, len(users))
	for n := range users {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := k.providerConfig(ns, name, users[name]); err != nil {
			return err
		}
	}
	for _, r := range runs.Items {
		if w := r.Status.WaitingOn; w != nil && w.Reason == arv1.WaitNeedsSetup && !r.Status.Phase.IsTerminal() {
			k.fix("run %s/%s waits on setup (%s): %s", ns, r.Name, w.Blocker, w.Remedy)
		}
	}
	return nil
}

func (k *checker) providerConfig(ns, name string, runs []string) error {
	usedBy := ""
	if len(runs) > 0 {
		sort.Strings(runs)
		plural := "s"
		if len(runs) == 1 {
			plural = ""
		}
		usedBy = fmt.Sprintf(" (used by %d unfinished run%s: %s)", len(runs), plural, clip(strings.Join(runs, ", "), 120))
	}
	var cm corev1.ConfigMap
	err := k.c.Get(k.ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		k.fix("provider ConfigMap %s/%s is missing%s: kubectl create configmap %s -n %s --from-file=%s",
			ns, name, usedBy, name, ns, providerconfig.DataKey)
		return nil
	case k.refused("provider ConfigMap "+ns+"/"+name, err):
		return nil
	case err != nil:
		return fmt.Errorf("reading provider ConfigMap %s/%s: %w", ns, name, err)
	}
	cfg, err := providerconfig.Parse(cm.Data)
	if err != nil {
		k.fix("provider ConfigMap %s/%s does not parse%s: %v", ns, name, usedBy, err)
		return nil
	}
	provs := make([]string, len(cfg.Providers))
	for i, p := range cfg.Providers {
		provs[i] = p.Name
	}
	k.ok("provider ConfigMap %s/%s: providers %s%s", ns, name, orNone(provs), usedBy)
	for _, p := range cfg.Providers {
		if p.APIKeySecret == nil {
			continue
		}
		if err := k.secretKey(ns, p.APIKeySecret.Name, p.APIKeySecret.Key, fmt.Sprintf("provider %q's API key", p.Name)); err != nil {
			return err
		}
	}
	return nil
}

// secretKey: the Secret exists and holds a non-empty key. The value is
// read (RBAC has no "which keys" right) and dropped; nothing of it is
// printed.
func (k *checker) secretKey(ns, name, key, holds string) error {
	var s corev1.Secret
	err := k.c.Get(k.ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		k.fix("Secret %s/%s (%s, key %q) is missing: kubectl create secret generic %s -n %s --from-literal=%s=<value>",
			ns, name, holds, key, name, ns, key)
		return nil
	case k.refused(fmt.Sprintf("Secret %s/%s (%s)", ns, name, holds), err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	if strings.TrimSpace(string(s.Data[key])) == "" {
		k.fix("Secret %s/%s has no non-empty key %q (%s): kubectl create secret generic %s -n %s --from-literal=%s=<value> --dry-run=client -o yaml | kubectl apply -f -",
			ns, name, key, holds, name, ns, key)
		return nil
	}
	k.ok("Secret %s/%s has key %q (%s)", ns, name, key, holds)
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
