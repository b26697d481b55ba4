package nodedrain

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/cordon"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
)

// cordon marks the node unschedulable, recording that vacate did it; a node
// someone else cordoned is left as it is and never uncordoned by vacate.
// The admission controller cordoned a drain of a batch before admitting it;
// this stage cordons what nobody did: a node someone uncordoned meanwhile.
func (r *Reconciler) cordon(ctx context.Context, s *scope) (reconcile.Result, error) {
	node, nd := s.node, s.drain
	if !node.Spec.Unschedulable {
		s.log.Info("cordoning node", "node", klogRef(node.Name))
		if _, err := cordon.Cordon(ctx, r.Client, node, nd); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		r.drainEvent(nd, node, corev1.EventTypeNormal, v1alpha1.EventCordoned, "Cordon", "cordoned node %s", node.Name)
	}
	s.found.cordoned = true
	return reconcile.Result{}, nil
}

// keepDaemonSetsOff taints the node, before any DaemonSet pod is evicted,
// when the policy evicts DaemonSet pods (pods.daemonSets: Evict): they
// tolerate the cordon, and their DaemonSet would put each back at once.
// Undo removes the taint (its value is this drain's UID).
func (r *Reconciler) keepDaemonSetsOff(ctx context.Context, s *scope) (reconcile.Result, error) {
	if !s.policy.Rules.EvictDaemonSets || cordon.KeepsDaemonSetsOff(s.node, s.drain) {
		return reconcile.Result{}, nil
	}
	changed, err := cordon.KeepDaemonSetsOff(ctx, r.Client, s.node, s.drain)
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if changed {
		s.log.Info("tainted the node so that DaemonSets put no pod back while it drains", "node", klogRef(s.node.Name), "taint", v1alpha1.TaintDaemonSetsOff)
		r.drainEvent(s.drain, s.node, corev1.EventTypeNormal, v1alpha1.EventCordoned, "Taint",
			"tainted node %s with %s (NoSchedule) so that DaemonSets put no pod back while it drains (pods.daemonSets: Evict)", s.node.Name, v1alpha1.TaintDaemonSetsOff)
	}
	return reconcile.Result{}, nil
}
