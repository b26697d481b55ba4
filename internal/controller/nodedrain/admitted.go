package nodedrain

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// admitted lets the drain go on once the admission controller admitted it
// (Admitted=True, written before anything is evicted). Until then the drain
// is Pending and its pass ends here: the admission controller records why
// it waits, its place in the queue, and cordons it when it may start soon.
// A deadline never ends a drain that has not started: a drain whose
// deadline passed while it waited (or before it was requested, on the
// clock of the machine that set it) is admitted first, and drains as fast
// as allowed; failing it would only leave the pods on a machine that goes.
func (r *Reconciler) admitted(_ context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	if !nd.Admitted() {
		if nd.Status.Phase == "" {
			nd.Status.Phase = v1alpha1.PhasePending
		}
		reportWaitingCordon(s)
		s.stop = true
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, nil
}

// reportWaitingCordon reports the cordon of a drain that waits: admission
// cordons a batch before any of it starts, and gives the node back while
// its drain waits for a maintenance window. The Cordoned condition is this
// controller's alone to write; admission only changes the node, whose
// update brings this pass.
func reportWaitingCordon(s *scope) {
	nd := s.drain
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted); c != nil &&
		(c.Reason == schedule.OutsideWindow || c.Reason == schedule.InvalidSchedule) {
		meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionCordoned)
		return
	}
	if reason, msg, cordoned := nd.CordonState(s.node); cordoned {
		s.setCondition(v1alpha1.ConditionCordoned, metav1.ConditionTrue, reason, msg)
	}
}

// hold stops the pass of a drain that may neither go on nor start: its
// node is missing or was replaced, or its policy is missing or unclear.
// The admission controller holds it for the same causes (Admitted=False
// with the reason, and any admission given up); this controller writes no
// Admitted and only stops its own work: the drain is Pending, reports no
// blockers, and forgets what it knew of the node's pods and hooks. The
// node stays as it is.
func (r *Reconciler) hold(s *scope) {
	nd := s.drain
	nd.Status.Phase = v1alpha1.PhasePending
	nd.Status.Blockers, nd.Status.Blocked, nd.Status.BlockersOmitted = nil, 0, 0
	meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionBlocked)
	r.forgetNode(nd.Spec.NodeName)
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	r.blocked.set(nd.Name)
}
