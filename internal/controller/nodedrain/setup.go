package nodedrain

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// IndexPods registers the pod index the controller lists by.
func IndexPods(ctx context.Context, mgr manager.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodNodeNameIndex, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	})
}

// SetupWithManager registers the controller, its watches, its eviction
// queue and its HTTP hook prober (both run only on the leader, and stop when
// leadership ends).
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.Evictions.Run(ctx)
		return nil
	})); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(r.Hooks.Run)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodedrain").
		For(&v1alpha1.NodeDrain{}).
		// A drain that ends, is undone or is cordoned may let a queued one start.
		Watches(&v1alpha1.NodeDrain{}, handler.EnqueueRequestsFromMapFunc(r.queuedDrains),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: slotMayFree, GenericFunc: func(event.GenericEvent) bool { return false }})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.drainOfPod)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.drainOfNode)).
		Watches(&policyv1.PodDisruptionBudget{}, handler.EnqueueRequestsFromMapFunc(r.drainsOfPDB)).
		Watches(&v1alpha1.Evacuation{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return r.drainNamed(ctx, o.(*v1alpha1.Evacuation).Spec.NodeName)
		})).
		Watches(&v1alpha1.EvacuationProvider{}, handler.EnqueueRequestsFromMapFunc(r.activeDrains)).
		Watches(&v1alpha1.DrainPolicy{}, handler.EnqueueRequestsFromMapFunc(r.activeDrains),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})). // not on status writes
		WatchesRawSource(source.Channel(r.Wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// slotMayFree reports whether a drain's change can change the admission of
// others: its phase, its admission, its cordon, or its requesters coming or going.
func slotMayFree(e event.UpdateEvent) bool {
	o, n := e.ObjectOld.(*v1alpha1.NodeDrain), e.ObjectNew.(*v1alpha1.NodeDrain)
	cond := func(nd *v1alpha1.NodeDrain, t string) metav1.ConditionStatus {
		if c := meta.FindStatusCondition(nd.Status.Conditions, t); c != nil {
			return c.Status
		}
		return ""
	}
	return o.Status.Phase != n.Status.Phase || !n.DeletionTimestamp.IsZero() ||
		(len(o.Spec.Requesters) == 0) != (len(n.Spec.Requesters) == 0) ||
		cond(o, v1alpha1.ConditionAdmitted) != cond(n, v1alpha1.ConditionAdmitted) ||
		cond(o, v1alpha1.ConditionCordoned) != cond(n, v1alpha1.ConditionCordoned)
}

// queuedDrains are the drains waiting for admission, but the one that changed.
func (r *Reconciler) queuedDrains(ctx context.Context, o client.Object) []reconcile.Request {
	r.queue.invalidate()
	list := &v1alpha1.NodeDrainList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		nd := &list.Items[i]
		if nd.Name != o.GetName() && running(nd) && !isAdmitted(nd) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nd.Name}})
		}
	}
	return out
}

// drainOfPod wakes the drain of the pod's node, if there is one.
func (r *Reconciler) drainOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	return r.drainNamed(ctx, o.(*corev1.Pod).Spec.NodeName)
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
	r.queue.invalidate()
	list := &v1alpha1.NodeDrainList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, nd := range list.Items {
		if nd.Status.Phase != v1alpha1.PhaseDrained && nd.Status.Phase != v1alpha1.PhaseFailed {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nd.Name}})
		}
	}
	return out
}
