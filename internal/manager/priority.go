package manager

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/prioritypolicy"
)

// priorityClasses keeps the cluster admin's priority classes current: read
// once before the manager starts (so runs found at start are lined up by
// them), then watched (a field selector on the one ConfigMap, apart from
// the manager's caches, on every replica). Each change re-orders the runs
// waiting in line. An edit that does not parse keeps the classes in force
// and is reported as a Warning Event on the ConfigMap and in the log.
//
// The classes in force are also written into the priority-class admission
// policy (internal/prioritypolicy), which is watched by name too, so a
// re-applied install's empty table is written over at once.
type priorityClasses struct {
	store    *priority.Store
	cm       types.NamespacedName
	cfg      *rest.Config
	recorder events.EventRecorder
	log      logr.Logger
	// changed re-orders the line (set once the reconciler is built).
	changed func(context.Context)

	// policy names the admission policy holding the classes ("" none).
	policy string
	// policyMu serialises the policy's writes; policyErr is the last
	// failure logged, so a lasting one is logged once.
	policyMu  sync.Mutex
	policyErr string
	clientset kubernetes.Interface
}

// policyResync re-reads the watched policy this often, so a write that
// failed (the API server was away) is tried again without an edit.
const policyResync = 10 * time.Minute

func (p *priorityClasses) NeedLeaderElection() bool { return false }

// load reads the ConfigMap now; one that is missing or unreadable leaves
// no classes (spec.priority alone orders the line until the watch sees
// one).
func (p *priorityClasses) load(ctx context.Context, reader client.Reader) {
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, p.cm, cm)
	switch {
	case apierrors.IsNotFound(err):
		p.apply(ctx, nil)
	case err != nil:
		p.log.Error(err, "Reading the priority classes; none in force until the watch reads them", "configMap", p.cm.String())
	default:
		p.apply(ctx, cm)
	}
}

func (p *priorityClasses) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(p.cfg)
	if err != nil {
		return err
	}
	p.clientset = cs
	if p.policy != "" {
		plw := toolscache.NewListWatchFromClient(cs.AdmissionregistrationV1().RESTClient(), "validatingadmissionpolicies", "",
			fields.OneTermEqualSelector("metadata.name", p.policy))
		_, pinf := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
			ListerWatcher: plw,
			ObjectType:    &admissionv1.ValidatingAdmissionPolicy{},
			ResyncPeriod:  policyResync,
			Handler: toolscache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { p.syncPolicy(ctx, obj) },
				UpdateFunc: func(_, obj any) { p.syncPolicy(ctx, obj) },
			},
		})
		go pinf.RunWithContext(ctx)
	}
	lw := toolscache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", p.cm.Namespace,
		fields.OneTermEqualSelector("metadata.name", p.cm.Name))
	_, informer := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { p.apply(ctx, obj) },
			UpdateFunc: func(_, obj any) { p.apply(ctx, obj) },
			DeleteFunc: func(any) { p.apply(ctx, nil) },
		},
	})
	informer.RunWithContext(ctx)
	return nil
}

// apply puts the classes of obj (nil: none) in force and re-orders the line.
func (p *priorityClasses) apply(ctx context.Context, obj any) {
	cm, _ := obj.(*corev1.ConfigMap)
	var classes priority.Classes
	if cm != nil {
		c, err := priority.Parse(cm.Data)
		if err != nil {
			p.log.Error(err, "The priority classes ConfigMap does not parse; the classes in force are kept until it does", "configMap", p.cm.String())
			if p.recorder != nil {
				p.recorder.Eventf(cm, nil, corev1.EventTypeWarning, "PriorityClassesInvalid", "ApplyPriorityClasses",
					"Not applied, the previous priority classes stay in force: %v", err)
			}
			return
		}
		classes = c
	}
	p.store.Set(classes)
	p.log.Info("Priority classes in force", "configMap", p.cm.String(), "fromConfigMap", cm != nil, "default", classes.Default())
	p.syncPolicy(ctx, nil)
	if p.changed != nil {
		p.changed(ctx)
	}
}

// syncPolicy writes the classes in force into the admission policy, if
// one is named and it does not hold them already (seen: the policy as the
// watch saw it, nil to read it). A policy the cluster admin deleted (to
// check no class at apply) is logged, not recreated.
func (p *priorityClasses) syncPolicy(ctx context.Context, seen any) {
	if p.policy == "" || p.clientset == nil {
		return
	}
	p.policyMu.Lock()
	defer p.policyMu.Unlock()
	exprs := prioritypolicy.Expressions(p.store.Load(), p.cm.String())
	if vap, ok := seen.(*admissionv1.ValidatingAdmissionPolicy); ok {
		if changed, err := prioritypolicy.Apply(vap.DeepCopy(), exprs); err == nil && !changed {
			p.policyErr = ""
			return
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wrote, err := prioritypolicy.Sync(ctx, p.clientset.AdmissionregistrationV1().ValidatingAdmissionPolicies(), p.policy, exprs)
	switch {
	case err == nil:
		p.policyErr = ""
		if wrote {
			p.log.Info("Priority classes written into the admission policy", "policy", p.policy, "classes", exprs[prioritypolicy.VarClassNames])
		}
	case err.Error() == p.policyErr:
	case apierrors.IsNotFound(err):
		p.policyErr = err.Error()
		p.log.Info("No priority-class admission policy: class names are not checked when runs are applied", "policy", p.policy)
	default:
		p.policyErr = err.Error()
		p.log.Error(err, "Writing the priority classes into the admission policy; tried again on its next change", "policy", p.policy)
	}
}

// newPriorityClasses reads the classes in force at start (none when no
// ConfigMap is named).
func newPriorityClasses(mgr ctrl.Manager, cfg *rest.Config, o Options) *priorityClasses {
	p := &priorityClasses{store: &priority.Store{}, cm: o.PriorityClasses, cfg: cfg, policy: o.PriorityPolicy,
		recorder: mgr.GetEventRecorder("agentrun-operator"), log: ctrl.Log.WithName("priority")}
	if o.PriorityClasses.Name != "" {
		p.load(context.Background(), mgr.GetAPIReader())
	}
	return p
}
