package nodedrain

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// hasNoExecuteTrigger reports whether the node carries the trigger taint
// with effect NoExecute.
func hasNoExecuteTrigger(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == v1alpha1.TaintDrain && t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}

// noExecuteMessage says what a NoExecute trigger taint does, and what to
// use instead.
func noExecuteMessage(node string) string {
	return fmt.Sprintf("node %s has the taint %s with effect NoExecute: Kubernetes' taint manager deletes every pod "+
		"that does not tolerate it at once, without PodDisruptionBudgets, evacuations or HTTP hooks; vacate drains "+
		"what is left. Use effect NoSchedule for the trigger taint (kubectl taint node %s %s:NoExecute- %s:NoSchedule)",
		node, v1alpha1.TaintDrain, node, v1alpha1.TaintDrain, v1alpha1.TaintDrain)
}

// warnNoExecute keeps the NoExecuteTaint condition in step with the node:
// True while it carries the trigger taint with effect NoExecute (the drain
// is still requested and runs), False once it no longer does; a drain that
// never saw such a taint has no such condition. The Warning event on the
// node goes with each change to True, once its status is written.
func (r *Reconciler) warnNoExecute(s *scope, node *corev1.Node) {
	nd := s.drain
	s.found.node, s.found.noExecute = node, true
	if hasNoExecuteTrigger(node) && !meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionNoExecuteTaint) {
		msg := noExecuteMessage(node.Name)
		s.afterWrite(func() {
			r.Events.Eventf(node, nd, corev1.EventTypeWarning, v1alpha1.EventNoExecuteTaint, "Drain", "%s", msg)
		})
	}
}
