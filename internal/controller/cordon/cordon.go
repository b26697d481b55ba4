// Package cordon marks a node unschedulable for a drain, and gives it back,
// recording who did it: a node vacate cordoned carries the drain's name and
// UID in AnnotationCordonedBy, and only that drain's undo uncordons it. A
// node someone else cordoned is never uncordoned by vacate.
package cordon

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Cordon marks the node unschedulable for the drain and records it, with an
// optimistic lock on the node it was given (a conflict is returned as it
// is: the caller's copy was stale). A node already unschedulable is left as
// it is. It reports whether it changed the node; node is updated in place
// once the write succeeded, and left as it was when it failed.
func Cordon(ctx context.Context, c client.Client, node *corev1.Node, nd *v1alpha1.NodeDrain) (bool, error) {
	if node.Spec.Unschedulable {
		return false, nil
	}
	err := patch(ctx, c, node, func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[v1alpha1.AnnotationCordonedBy] = v1alpha1.CordonedByValue(nd)
	})
	if err != nil {
		return false, fmt.Errorf("cordoning node %s: %w", node.Name, err)
	}
	return true, nil
}

// Uncordon gives the node back if this drain cordoned it (nd.Cordoned), and
// removes the record, under the same optimistic lock. It reports whether it
// changed the node.
func Uncordon(ctx context.Context, c client.Client, node *corev1.Node, nd *v1alpha1.NodeDrain) (bool, error) {
	if !nd.Cordoned(node) {
		return false, nil
	}
	err := patch(ctx, c, node, func(n *corev1.Node) {
		n.Spec.Unschedulable = false
		delete(n.Annotations, v1alpha1.AnnotationCordonedBy)
	})
	if err != nil {
		return false, fmt.Errorf("uncordoning node %s: %w", node.Name, err)
	}
	return true, nil
}

// KeepsDaemonSetsOff reports whether the node carries this drain's taint
// that keeps DaemonSet pods off it (v1alpha1.TaintDaemonSetsOff, its value
// the drain's UID), on the node the drain recorded.
func KeepsDaemonSetsOff(node *corev1.Node, nd *v1alpha1.NodeDrain) bool {
	if nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID) {
		return false
	}
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == v1alpha1.TaintDaemonSetsOff && t.Value == string(nd.UID) && t.Effect == corev1.TaintEffectNoSchedule
	})
}

// KeepDaemonSetsOff taints the node so that DaemonSets create no new pod on
// it while the drain evicts theirs (they tolerate the cordon): the taint
// v1alpha1.TaintDaemonSetsOff, effect NoSchedule, its value the drain's UID,
// under an optimistic lock. A node that has the taint already (whatever its
// value) is left as it is. It reports whether it changed the node.
func KeepDaemonSetsOff(ctx context.Context, c client.Client, node *corev1.Node, nd *v1alpha1.NodeDrain) (bool, error) {
	if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == v1alpha1.TaintDaemonSetsOff }) {
		return false, nil
	}
	err := patch(ctx, c, node, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDaemonSetsOff, Value: string(nd.UID), Effect: corev1.TaintEffectNoSchedule})
	})
	if err != nil {
		return false, fmt.Errorf("tainting node %s to keep DaemonSet pods off: %w", node.Name, err)
	}
	return true, nil
}

// LetDaemonSetsBack removes this drain's taint (KeepsDaemonSetsOff), and no
// other, under an optimistic lock. It reports whether it changed the node.
func LetDaemonSetsBack(ctx context.Context, c client.Client, node *corev1.Node, nd *v1alpha1.NodeDrain) (bool, error) {
	if !KeepsDaemonSetsOff(node, nd) {
		return false, nil
	}
	err := patch(ctx, c, node, func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == v1alpha1.TaintDaemonSetsOff && t.Value == string(nd.UID)
		})
	})
	if err != nil {
		return false, fmt.Errorf("removing the taint %s from node %s: %w", v1alpha1.TaintDaemonSetsOff, node.Name, err)
	}
	return true, nil
}

// patch applies change to a copy of node and sends the difference as a
// merge patch, locked on node's resourceVersion. Only once the server took
// it does node become the result: a write that failed leaves the caller's
// copy as it was read (changed in memory, it would read as cordoned, or
// not, when the node is not).
func patch(ctx context.Context, c client.Client, node *corev1.Node, change func(*corev1.Node)) error {
	updated := node.DeepCopy()
	change(updated)
	if err := c.Patch(ctx, updated, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	*node = *updated
	return nil
}

// DrainConditions are the Node conditions vacate sets while it drains a
// node (v1alpha1.NodeDrainConditions).
var DrainConditions = v1alpha1.NodeDrainConditions

// SetDrainConditions makes the node's drain conditions (DrainConditions)
// the wanted ones: each wanted is set (its transition time kept while its
// status stays), and those not wanted are removed; no other condition is
// touched (a strategic merge patch of nodes/status, conditions merged by
// type). Status, reason and message decide whether anything changed; it
// reports whether it wrote, and node becomes the result once it did.
func SetDrainConditions(ctx context.Context, c client.Client, node *corev1.Node, want []corev1.NodeCondition, now time.Time) (bool, error) {
	updated := node.DeepCopy()
	var kept []corev1.NodeCondition
	changed := false
	for _, have := range updated.Status.Conditions {
		if !slices.Contains(DrainConditions, have.Type) {
			kept = append(kept, have)
			continue
		}
		i := slices.IndexFunc(want, func(w corev1.NodeCondition) bool { return w.Type == have.Type })
		if i < 0 {
			changed = true // no longer wanted: removed
			continue
		}
		w := want[i]
		if have.Status == w.Status && have.Reason == w.Reason && have.Message == w.Message {
			kept = append(kept, have)
			continue
		}
		w.LastHeartbeatTime, w.LastTransitionTime = metav1.NewTime(now), have.LastTransitionTime
		if have.Status != w.Status {
			w.LastTransitionTime = metav1.NewTime(now)
		}
		kept, changed = append(kept, w), true
	}
	for _, w := range want {
		if !slices.ContainsFunc(node.Status.Conditions, func(h corev1.NodeCondition) bool { return h.Type == w.Type }) {
			w.LastHeartbeatTime, w.LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
			kept, changed = append(kept, w), true
		}
	}
	if !changed {
		return false, nil
	}
	updated.Status.Conditions = kept
	if err := c.Status().Patch(ctx, updated, client.StrategicMergeFrom(node)); err != nil {
		return false, fmt.Errorf("setting the drain conditions of node %s: %w", node.Name, err)
	}
	*node = *updated
	return true, nil
}
