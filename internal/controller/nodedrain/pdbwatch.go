package nodedrain

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
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
	r.queue.invalidate()
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector) // nil selects nothing, {} everything
	if err != nil {
		return r.activeDrains(ctx, o)
	}
	pods := &corev1.PodList{}
	// Read only: the cache's objects need no copies.
	if err := r.Client.List(ctx, pods, client.InNamespace(pdb.Namespace), client.MatchingLabelsSelector{Selector: sel},
		client.UnsafeDisableDeepCopy); err != nil {
		return r.activeDrains(ctx, o)
	}
	var nodes []string
	for i := range pods.Items {
		if n := pods.Items[i].Spec.NodeName; n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
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
