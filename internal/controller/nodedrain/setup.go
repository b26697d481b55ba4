package nodedrain

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/eviction"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/surge"
)

// SetupWithManager registers the controller, its watches and its HTTP
// hook prober (run only on the leader, stopped when leadership ends). The
// eviction queue it feeds is registered beside it (controller.Setup).
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(r.Hooks.Run)); err != nil {
		return err
	}
	pods, podChange := settle(handler.EnqueueRequestsFromMapFunc(r.drainsOfPod), podSettle), predicate.Funcs{UpdateFunc: podChanged}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodedrain").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Workers, 1)}).
		For(&v1alpha1.NodeDrain{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return !progressUpdate(e) },
		}))
	if r.PodSource != nil {
		b = b.WatchesRawSource(&source.Informer{Informer: r.PodSource, Handler: pods, Predicates: []predicate.Predicate{podChange}})
	} else {
		b = b.Watches(&corev1.Pod{}, pods, builder.WithPredicates(podChange))
	}
	if r.SliceSource != nil {
		b = b.WatchesRawSource(&source.Informer{Informer: r.SliceSource, Handler: r.slicesHandler()})
	} else {
		b = b.Watches(&discoveryv1.EndpointSlice{}, r.slicesHandler())
	}
	b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.drainOfNode)).
		Watches(&policyv1.PodDisruptionBudget{}, settle(r.pdbHandler(), podSettle)).
		Watches(&v1alpha1.Evacuation{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.drainNamed(ctx, o.(*v1alpha1.Evacuation).Spec.NodeName)
		})).
		Watches(&v1alpha1.EvacuationProvider{}, handler.EnqueueRequestsFromMapFunc(r.activeDrains)).
		Watches(&v1alpha1.DrainPolicy{}, handler.EnqueueRequestsFromMapFunc(r.activeDrains),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})). // not on status writes
		WatchesRawSource(source.Channel(r.Wake, &handler.EnqueueRequestForObject{}))
	if r.Requests { // the responders' progress, for the status (requests.go)
		b = b.Watches(&lifecyclev1alpha1.Eviction{}, handler.EnqueueRequestsFromMapFunc(r.drainOfTarget),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
				// What the drain's status shows of it, not heartbeats.
				return er.Progress(e.ObjectOld.(*lifecyclev1alpha1.Eviction)) != er.Progress(e.ObjectNew.(*lifecyclev1alpha1.Eviction))
			}}))
	}
	return b.Complete(r)
}

// drainOfTarget wakes the drain of the node of an Eviction's pod.
func (r *Reconciler) drainOfTarget(ctx context.Context, o client.Object) []reconcile.Request {
	t := o.(*lifecyclev1alpha1.Eviction).Spec.Target.Pod
	if t == nil {
		return nil
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: t.Name}, pod); err != nil || pod.UID != t.UID {
		return nil
	}
	return r.drainNamed(ctx, pod.Spec.NodeName)
}

// podChanged reports whether a pod's update changed anything the cache
// keeps of it but its resourceVersion: the cache keeps only what vacate
// reads (operator.slimPod), so most status updates of a running pod
// (conditions, container statuses) arrive as no change at all.
// It compares shallow copies (every pod update in the cluster comes
// through here; two deep copies each were most of this predicate's cost),
// which only set fields of their own.
func podChanged(e event.UpdateEvent) bool {
	o, n := *e.ObjectOld.(*corev1.Pod), *e.ObjectNew.(*corev1.Pod)
	o.ResourceVersion, n.ResourceVersion = "", ""
	o.ManagedFields, n.ManagedFields = nil, nil
	return !equality.Semantic.DeepEqual(&o, &n)
}

// drainsOfPod wakes the drain of the pod's node, if there is one. A pod
// vacate evicted that is now terminating also gives its PDBs' budget back
// (its eviction no longer counts as underway, budget.go): that wakes the
// drains with a pod waiting on those PDBs, which may evict one now; not
// when the PDBs' statuses already count its eviction (countedBy), as they
// mostly do by then: its claim took nothing from their budgets.
func (r *Reconciler) drainsOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	pod := o.(*corev1.Pod)
	out := r.drainNamed(ctx, pod.Spec.NodeName)
	if d := pod.Labels[surge.LabelDrain]; d != "" && d != pod.Spec.NodeName {
		out = append(out, r.drainNamed(ctx, d)...) // a replacement wakes the drain that waits on it
	}
	if pod.DeletionTimestamp.IsZero() {
		return out
	}
	claim, claimed := r.Evictions.Claim(pod.UID)
	if !claimed || r.countedByAll(claim) {
		return out
	}
	seen := map[string]bool{pod.Spec.NodeName: true}
	for _, key := range claim.PDBs {
		for _, req := range r.waitingOn(key) {
			if !seen[req.Name] {
				seen[req.Name] = true
				out = append(out, req)
			}
		}
	}
	return out
}

// countedByAll says whether every PDB of the eviction already counts it
// (eviction.CountedBy), as the PDB watch shows them now: its claim takes
// nothing from any budget, so its end gives nothing back.
func (r *Reconciler) countedByAll(claim eviction.Request) bool {
	if len(claim.PDBs) == 0 {
		return false
	}
	for i, k := range claim.PDBs {
		var mark metav1.Time
		if i < len(claim.Marks) {
			mark = claim.Marks[i]
		}
		if !eviction.CountedBy(r.guards.Get(k), claim.Pod.Name, mark) {
			return false
		}
	}
	return true
}

func (r *Reconciler) drainOfNode(ctx context.Context, o client.Object) []reconcile.Request {
	return r.drainNamed(ctx, o.GetName())
}

func (r *Reconciler) drainNamed(ctx context.Context, name string) []reconcile.Request {
	if name == "" {
		return nil
	}
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, nd); err != nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
}

// activeDrains wakes every drain still in progress: a policy or provider
// change may concern any of them.
func (r *Reconciler) activeDrains(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.NodeDrainList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, nd := range list.Items {
		if !nd.Ended() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nd.Name}})
		}
	}
	return out
}

// podSettle is how long the wake-up of a pod's or a PDB's event waits
// before its drain's pass runs. One eviction's events (the pod terminating,
// then gone, and its PDB's status after each) and those of the pods evicted
// together arrive milliseconds apart: they wake one pass, not one each.
const podSettle = 200 * time.Millisecond

// settle has the handler's wake-ups wait, each drain's together:
// the queue keeps one wake-up per drain, due at the earliest.
func settle(h handler.EventHandler, after time.Duration) handler.EventHandler {
	wrap := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return settling{TypedRateLimitingInterface: q, after: after}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, wrap(q))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, wrap(q))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, wrap(q))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, wrap(q))
		},
	}
}

// settling is a queue whose Add waits.
type settling struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	after time.Duration
}

func (q settling) Add(req reconcile.Request) { q.AddAfter(req, q.after) }
