package manager

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/agentrun-dev/agentrun-operator/controllers"
	"github.com/agentrun-dev/agentrun-operator/internal/quotapolicy"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
)

// addQuotas registers the quotas' status reconciler (on the leader) and,
// when a quota admission policy is named, the writer of whether this
// manager has a database store into it (on every replica: they agree).
func addQuotas(mgr ctrl.Manager, cfg *rest.Config, o Options, st *router.Router) error {
	var runs client.Reader = mgr.GetClient()
	if o.Shards > 1 {
		runs = mgr.GetAPIReader() // no cache holds every run
	}
	r := controllers.NewQuotaStatus(controllers.QuotaStatusOptions{
		Client: mgr.GetClient(), Runs: runs, DB: st.Quotas(), Clock: o.Clock,
		Interval: o.QuotaStatusInterval, Cluster: len(o.Namespaces) == 0,
	})
	if err := r.SetupWithManager(mgr, controller.Options{SkipNameValidation: &o.SkipNameValidation}); err != nil {
		return err
	}
	if o.QuotaPolicy == "" {
		return nil
	}
	return mgr.Add(&quotaPolicy{cfg: cfg, name: o.QuotaPolicy, database: st.Database(), log: ctrl.Log.WithName("quotas")})
}

// quotaPolicy keeps the quota admission policy's database variable equal
// to this manager's configuration: written at start, and again whenever
// the policy changes (re-applied with the install's default), watched by
// name.
type quotaPolicy struct {
	cfg      *rest.Config
	name     string
	database bool
	log      logr.Logger

	mu      sync.Mutex
	lastErr string
	cs      kubernetes.Interface
}

func (p *quotaPolicy) NeedLeaderElection() bool { return false }

func (p *quotaPolicy) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(p.cfg)
	if err != nil {
		return err
	}
	p.cs = cs
	lw := toolscache.NewListWatchFromClient(cs.AdmissionregistrationV1().RESTClient(), "validatingadmissionpolicies", "",
		fields.OneTermEqualSelector("metadata.name", p.name))
	_, inf := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &admissionv1.ValidatingAdmissionPolicy{},
		ResyncPeriod:  policyResync,
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.sync(ctx, obj) },
			UpdateFunc: func(_, obj any) { p.sync(ctx, obj) },
		},
	})
	inf.RunWithContext(ctx)
	return nil
}

// sync writes the variable unless seen (the policy as watched) holds it.
func (p *quotaPolicy) sync(ctx context.Context, seen any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if vap, ok := seen.(*admissionv1.ValidatingAdmissionPolicy); ok {
		if changed, err := quotapolicy.Apply(vap.DeepCopy(), p.database); err == nil && !changed {
			p.lastErr = ""
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wrote, err := quotapolicy.Sync(ctx, p.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies(), p.name, p.database)
	switch {
	case err == nil:
		p.lastErr = ""
		if wrote {
			p.log.Info("Wrote whether the manager has a database store into the quota admission policy", "policy", p.name, "database", p.database)
		}
	case err.Error() == p.lastErr:
	case apierrors.IsNotFound(err):
		p.lastErr = err.Error()
		p.log.Info("No quota admission policy: spend quotas are not checked against the store when applied", "policy", p.name)
	default:
		p.lastErr = err.Error()
		p.log.Error(err, "Writing the quota admission policy; tried again on its next change", "policy", p.name)
	}
}
