package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/cordon"
)

// Node conditions. Kubernetes 1.37 defines DrainInProgress and Drained on
// the Node for whoever drains it; vacate sets them from its drain's status,
// through the cordon's package (the one writer of what vacate changes on a
// Node), and removes them when the drain is undone.

// nodeConditions are the Node's drain conditions for the drain as its
// status now says: DrainInProgress while it runs (its phase, and what
// blocks it, in the message), Drained once it is, both False when it
// failed; none before it was admitted, nor while it is undone. The messages
// change only when the phase or the kind of blocker does, never with each
// eviction: every change is a write of the Node, which wakes every watcher
// of Nodes (vacate's controllers among them); the drain's status has the
// counts.
func nodeConditions(nd *v1alpha1.NodeDrain) []corev1.NodeCondition {
	st := nd.Status
	by := "vacate NodeDrain " + nd.Name
	switch st.Phase {
	case v1alpha1.PhaseCordoned, v1alpha1.PhaseEvacuating, v1alpha1.PhaseEvicting:
		msg := fmt.Sprintf("%s: %s", by, st.Phase)
		if len(st.Blockers) > 0 {
			msg += "; blocked: " + st.Blockers[0].Reason + " (vacate explain " + nd.Name + ")"
		}
		return []corev1.NodeCondition{
			{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionTrue, Reason: string(st.Phase), Message: msg},
			{Type: corev1.NodeDrained, Status: corev1.ConditionFalse, Reason: "DrainInProgress", Message: by + " is draining the node"},
		}
	case v1alpha1.PhaseDrained:
		return []corev1.NodeCondition{
			{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionFalse, Reason: string(st.Phase), Message: by + ": drained"},
			{Type: corev1.NodeDrained, Status: corev1.ConditionTrue, Reason: string(st.Phase), Message: by + ": every pod that had to leave has left"},
		}
	case v1alpha1.PhaseFailed:
		msg := by + ": failed"
		if r := st.Run; r != nil && r.Message != "" {
			msg += ": " + r.Message
		}
		return []corev1.NodeCondition{
			{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionFalse, Reason: string(st.Phase), Message: msg},
			{Type: corev1.NodeDrained, Status: corev1.ConditionFalse, Reason: string(st.Phase), Message: msg},
		}
	}
	return nil
}

// markNode writes the node's drain conditions for the drain's status, when
// they changed. A drain whose node was replaced (another UID) does not mark
// the new one.
func (r *Reconciler) markNode(ctx context.Context, s *scope) error {
	node := s.node
	if node == nil || s.found.undoing || (s.drain.Status.NodeUID != "" && s.drain.Status.NodeUID != string(node.UID)) {
		return nil
	}
	_, err := cordon.SetDrainConditions(ctx, r.Client, node, nodeConditions(s.drain), s.now)
	return err
}
