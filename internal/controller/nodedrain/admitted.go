package nodedrain

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"
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
	// A drain that runs again in this pass waits for admission afresh: the
	// pass removes the last run's admission (setStatus).
	if !s.drain.Admitted() || s.found.again != nil {
		// The Cordoned condition reports the cordon admission made, if
		// any: it is this controller's alone to write; admission only
		// changes the node, whose update brings this pass.
		s.found.waiting = true
		s.stop = true
	}
	return reconcile.Result{}, nil
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
	s.found.held = true
	nd.Status.Blockers, nd.Status.Blocked, nd.Status.BlockersOmitted = nil, 0, 0
	r.forgetNode(nd.Spec.NodeName)
	s.withdraw = true // its EvictionRequests too: nothing of the drain goes on
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	r.blocked.set(nd.Name)
}
