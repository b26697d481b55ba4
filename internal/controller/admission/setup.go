package admission

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
)

// SetupWithManager registers the controller. Its work items are queues
// (a DrainPolicy's name, or BuiltinKey), and HeldKey for the drains of no
// queue, so every event of a burst that concerns one policy's queue brings
// one pass of it, not one per drain.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("admission").
		Watches(&v1alpha1.NodeDrain{}, handler.EnqueueRequestsFromMapFunc(r.queueOfDrain),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: queueMayChange, GenericFunc: func(event.GenericEvent) bool { return false }})).
		Watches(&corev1.Node{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.addAll(ctx, q) // a percentage counts the governed nodes
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
				switch {
				case !maps.Equal(o.Labels, n.Labels):
					r.addAll(ctx, q) // it may change policy
				case o.Spec.Unschedulable != n.Spec.Unschedulable, !o.DeletionTimestamp.Equal(n.DeletionTimestamp):
					r.add(q, r.queueOfNode(ctx, n.Name)...)
				}
			},
			DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.addAll(ctx, q)
			},
		}).
		Watches(&v1alpha1.DrainPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allQueues),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})). // a selector moves nodes between queues
		Watches(&policyv1.PodDisruptionBudget{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				r.add(q, r.queuesOfPDB(ctx, e.Object.(*policyv1.PodDisruptionBudget))...)
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				o, n := e.ObjectOld.(*policyv1.PodDisruptionBudget), e.ObjectNew.(*policyv1.PodDisruptionBudget)
				if o.Status.DisruptionsAllowed == n.Status.DisruptionsAllowed && equality.Semantic.DeepEqual(o.Spec, n.Spec) {
					return // headroom is all admission reads of a PDB
				}
				r.add(q, r.queuesOfPDB(ctx, n)...)
				if !equality.Semantic.DeepEqual(o.Spec.Selector, n.Spec.Selector) {
					r.add(q, r.queuesOfPDB(ctx, o)...) // the queues of the pods it releases
				}
			},
			DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if pdb, ok := e.Object.(*policyv1.PodDisruptionBudget); ok {
					r.add(q, r.queuesOfPDB(ctx, pdb)...)
				}
			},
		}).
		Complete(r)
}

// queueMayChange reports whether a drain's change can change its queue:
// its phase, admission, cordon, request time, policy, node, its
// requesters coming or going, or the finalizer it needs to run.
func queueMayChange(e event.UpdateEvent) bool {
	o, n := e.ObjectOld.(*v1alpha1.NodeDrain), e.ObjectNew.(*v1alpha1.NodeDrain)
	cond := func(nd *v1alpha1.NodeDrain, t string) string {
		if c := meta.FindStatusCondition(nd.Status.Conditions, t); c != nil {
			return string(c.Status) + "/" + c.Reason
		}
		return ""
	}
	return o.Status.Phase != n.Status.Phase || !n.DeletionTimestamp.IsZero() ||
		(len(o.Spec.Requesters) == 0) != (len(n.Spec.Requesters) == 0) ||
		controllerutil.ContainsFinalizer(o, v1alpha1.FinalizerRestore) != controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerRestore) ||
		o.Spec.PolicyName != n.Spec.PolicyName || o.Status.NodeUID != n.Status.NodeUID ||
		!o.Status.RequestTime.Equal(n.Status.RequestTime) || o.Status.RunNumber != n.Status.RunNumber ||
		cond(o, v1alpha1.ConditionAdmitted) != cond(n, v1alpha1.ConditionAdmitted) ||
		cond(o, v1alpha1.ConditionCordoned) != cond(n, v1alpha1.ConditionCordoned)
}

func (r *Reconciler) add(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs ...reconcile.Request) {
	for _, req := range reqs {
		q.Add(req)
	}
}

func (r *Reconciler) addAll(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.add(q, r.allQueues(ctx, nil)...)
}

// allQueues are every queue: built-in defaults, each DrainPolicy, and
// HeldKey (a node created or deleted, a policy created, changed or deleted
// may hold a drain or release it).
func (r *Reconciler) allQueues(ctx context.Context, _ client.Object) []reconcile.Request {
	out := []reconcile.Request{keyRequest(BuiltinKey), keyRequest(HeldKey)}
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return out
	}
	for _, dp := range policies.Items {
		out = append(out, keyRequest(dp.Name))
	}
	return out
}

// queueOfDrain is the queue a drain belongs to, with HeldKey when it is
// held (Held); when its node is unknown, HeldKey and every queue it may
// belong to (an admitted drain of a missing node counts in all).
func (r *Reconciler) queueOfDrain(ctx context.Context, o client.Object) []reconcile.Request {
	nd := o.(*v1alpha1.NodeDrain)
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node); err != nil {
		if nd.Spec.PolicyName != "" {
			return []reconcile.Request{keyRequest(nd.Spec.PolicyName), keyRequest(HeldKey)}
		}
		return r.allQueues(ctx, nil)
	}
	return r.queueOf(ctx, nd, node)
}

// queueOfNode is the queue of the node's drain, if it has one.
func (r *Reconciler) queueOfNode(ctx context.Context, name string) []reconcile.Request {
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, nd); err != nil {
		return nil
	}
	return r.queueOfDrain(ctx, nd)
}

func (r *Reconciler) queueOf(ctx context.Context, nd *v1alpha1.NodeDrain, node *corev1.Node) []reconcile.Request {
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return r.allQueues(ctx, nil)
	}
	key, err := KeyOf(nd, node.Labels, policies.Items)
	switch {
	case err != nil && nd.Admitted():
		return r.allQueues(ctx, nil) // held, and until then it counts in every queue
	case err != nil:
		return []reconcile.Request{keyRequest(HeldKey)}
	}
	out := []reconcile.Request{keyRequest(key)}
	if reason, _ := Held(nd, node, policies.Items); reason != "" {
		out = append(out, keyRequest(HeldKey)) // a policy it names is missing, or its node was replaced
	}
	return out
}

// queuesOfPDB are the queues with a waiting drain whose node holds a pod
// the PDB selects: only they may see their headroom change. It looks at the
// drains waiting for admission and their nodes' pods (by index, without
// copies), not at the PDB's pods: a PDB changes with every eviction it
// allows, mostly while no drain waits at all.
func (r *Reconciler) queuesOfPDB(ctx context.Context, pdb *policyv1.PodDisruptionBudget) []reconcile.Request {
	drains := &v1alpha1.NodeDrainList{}
	if err := r.Client.List(ctx, drains, client.UnsafeDisableDeepCopy); err != nil {
		return r.allQueues(ctx, nil)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return r.allQueues(ctx, nil)
	}
	keys := map[string]bool{}
	for i := range drains.Items {
		nd := &drains.Items[i]
		if !nd.Running() || nd.Admitted() {
			continue
		}
		pods := &corev1.PodList{}
		if err := r.Client.List(ctx, pods, client.InNamespace(pdb.Namespace), client.MatchingFields{index.PodNodeName: nd.Spec.NodeName},
			client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
			return r.allQueues(ctx, nil)
		}
		if len(pods.Items) == 0 {
			continue
		}
		for _, req := range r.queueOfDrain(ctx, nd) {
			keys[req.Name] = true
		}
	}
	out := make([]reconcile.Request, 0, len(keys))
	for k := range keys {
		out = append(out, keyRequest(k))
	}
	return out
}

func keyRequest(key string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: key}}
}
