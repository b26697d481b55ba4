package nodedrain

import (
	"context"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/internal/controller/index"
)

// pdbHandler keeps the drains' view of the PodDisruptionBudgets (r.guards)
// and wakes the drains whose decisions a PodDisruptionBudget's change can
// change. The view changes before any drain wakes, in the same handler: a
// pass woken by a change plans with it. A status change (two or more per
// eviction it allows) wakes only the drains with a pod waiting on its
// budget (pdbWaiters), and only when it can free one (mayFree).
// A PDB created or deleted, or whose selector changed, changes which pods
// it guards: it wakes the drains of every node with a pod it selects (or
// selected). The PDBs of the cache's first list wake nothing: every drain
// has its own first pass then (at 208 PDBs and 10,000 pods their mapping
// was a seventh of the controller's CPU in a drain's first 90 s).
func (r *Reconciler) pdbHandler() handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
		for _, req := range reqs {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if pdb, ok := e.Object.(*policyv1.PodDisruptionBudget); ok {
				r.guards.Set(pdb)
			}
			if e.IsInInitialList {
				return // the cache's first list: every drain has a pass of its own then
			}
			add(q, r.drainsOfPDB(ctx, e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o, okOld := e.ObjectOld.(*policyv1.PodDisruptionBudget)
			n, okNew := e.ObjectNew.(*policyv1.PodDisruptionBudget)
			if okNew {
				r.guards.Set(n)
				// The eviction in flight the status counts frees its
				// PDB's slot: the next one goes without waiting for
				// its answer.
				if r.Evictions != nil { // a test's handler alone
					r.Evictions.Counted(n.Namespace+"/"+n.Name, n)
				}
			}
			if !okOld || !okNew || !equality.Semantic.DeepEqual(o.Spec.Selector, n.Spec.Selector) {
				add(q, r.drainsOfPDB(ctx, e.ObjectOld))
				add(q, r.drainsOfPDB(ctx, e.ObjectNew))
				return
			}
			if mayFree(o, n) {
				add(q, r.waitingOn(n.Namespace+"/"+n.Name))
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.guards.Delete(e.Object.GetNamespace(), e.Object.GetName())
			add(q, r.drainsOfPDB(ctx, e.Object))
			r.waiters.gone(e.Object.GetNamespace() + "/" + e.Object.GetName())
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, r.drainsOfPDB(ctx, e.Object))
		},
	}
}

// mayFree says whether a PDB's status change can let a pod that waits on
// its budget go: it allows a disruption, and allows more than before, or
// is of another generation (a refusal is tried again when that changes,
// refusal.go). The changes an eviction brings allow no more than before:
// the eviction API takes one from disruptionsAllowed, and the disruption
// controller's recounts of the pod leaving take nothing back (the claims a
// pass counts against the budget leave out the evictions the status
// counts, countedBy). Only the replacement turning Ready gives one back.
func mayFree(o, n *policyv1.PodDisruptionBudget) bool {
	switch {
	case n.Status.DisruptionsAllowed <= 0:
		return false
	case n.Status.DisruptionsAllowed > o.Status.DisruptionsAllowed:
		return true
	}
	return n.Generation != o.Generation || n.Status.ObservedGeneration != o.Status.ObservedGeneration
}

// waitingOn wakes the drains with a pod waiting on the PDB's budget.
func (r *Reconciler) waitingOn(pdb string) []reconcile.Request {
	drains := r.waiters.wake(pdb)
	out := make([]reconcile.Request, 0, len(drains))
	for _, name := range drains {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return out
}

// drainsOfPDB wakes the drains still in progress that have a pod on their
// node that the PodDisruptionBudget selects (same namespace, selector
// matching, read from the pod cache): their plans change with it, and it
// stamps the PDB for passes underway (pdbWaiters). It reads the pods of
// the drained nodes, for the rare changes of what a PDB guards. A selector
// that cannot be read wakes every drain in progress; a node whose pods
// cannot be read wakes its drain.
func (r *Reconciler) drainsOfPDB(ctx context.Context, o client.Object) []reconcile.Request {
	r.waiters.wake(o.GetNamespace() + "/" + o.GetName())
	pdb, ok := o.(*policyv1.PodDisruptionBudget)
	if !ok {
		return r.activeDrains(ctx, o)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return r.activeDrains(ctx, o)
	}
	var out []reconcile.Request
	for _, req := range r.activeDrains(ctx, o) {
		rctx, cancel := context.WithTimeout(ctx, pdbWakeRead)
		pods, err := r.Pods.Or(r.Client)(rctx, req.Name) // a drain is named after its node
		cancel()
		if err != nil || index.AnySelected(pods, pdb.Namespace, sel) {
			out = append(out, req)
		}
	}
	return out
}

// pdbWakeRead bounds drainsOfPDB's read of a node's pods, which waits for
// a scope still being listed.
const pdbWakeRead = 10 * time.Second
