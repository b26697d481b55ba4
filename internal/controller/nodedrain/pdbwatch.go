package nodedrain

import (
	"context"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
)

// drainsOfPDB wakes the drains still in progress that have a pod on their
// node that the PodDisruptionBudget selects (same namespace, selector
// matching, read from the cache): only their plans, budgets and admission
// change with it. A PDB's status changes with every eviction it allows, so
// waking every drain would cost drains x pods per eviction. An update is
// mapped for its old and its new object (EnqueueRequestsFromMapFunc maps
// both), so a selector change also wakes the drains of the pods it
// releases. A selector that cannot be read, or a cache that cannot be
// listed, wakes every drain in progress.
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
		if err := r.Client.Get(ctx, types.NamespacedName{Name: n}, nd); err != nil || !inProgress(nd) {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
	}
	return out
}

// inProgress reports whether a drain has not reached an end (Drained or Failed).
func inProgress(nd *v1alpha1.NodeDrain) bool {
	return nd.Status.Phase != v1alpha1.PhaseDrained && nd.Status.Phase != v1alpha1.PhaseFailed
}
