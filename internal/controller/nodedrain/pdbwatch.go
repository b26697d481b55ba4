package nodedrain

import (
	"context"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
)

// pdbHandler wakes the drains of a PodDisruptionBudget's pods (drainsOfPDB).
// An update whose selector is unchanged (its status changes with every
// eviction it allows) is mapped for the new object only; one that changes
// the selector, for the old object too, so that the drains of the pods it
// releases wake as well.
func (r *Reconciler) pdbHandler() handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
		for _, req := range reqs {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.drainsOfPDB(ctx, e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.drainsOfPDB(ctx, e.ObjectNew))
			o, okOld := e.ObjectOld.(*policyv1.PodDisruptionBudget)
			n, okNew := e.ObjectNew.(*policyv1.PodDisruptionBudget)
			if !okOld || !okNew || !equality.Semantic.DeepEqual(o.Spec.Selector, n.Spec.Selector) {
				add(q, r.drainsOfPDB(ctx, e.ObjectOld))
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.drainsOfPDB(ctx, e.Object))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.drainsOfPDB(ctx, e.Object))
		},
	}
}

// drainsOfPDB wakes the drains still in progress that have a pod on their
// node that the PodDisruptionBudget selects (same namespace, selector
// matching, read from the cache): only their plans, budgets and admission
// change with it. A PDB's status changes with every eviction it allows, so
// waking every drain would cost drains x pods per eviction. A selector that
// cannot be read, or a cache that cannot be listed, wakes every drain in
// progress.
func (r *Reconciler) drainsOfPDB(ctx context.Context, o client.Object) []reconcile.Request {
	pdb, ok := o.(*policyv1.PodDisruptionBudget)
	if !ok {
		return r.activeDrains(ctx, o)
	}
	nodes, err := index.NodesOfPDB(ctx, r.Client, pdb)
	if err != nil {
		return r.activeDrains(ctx, o)
	}
	var out []reconcile.Request
	for _, n := range nodes {
		nd := &v1alpha1.NodeDrain{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: n}, nd); err != nil || nd.Ended() {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
	return out
}
