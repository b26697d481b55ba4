// Package cordon marks a node unschedulable for a drain, and gives it back,
// recording who did it: a node vacate cordoned carries the drain's name and
// UID in AnnotationCordonedBy, and only that drain's undo uncordons it. A
// node someone else cordoned is never uncordoned by vacate.
package cordon

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// ByDrain reports whether the node carries this drain's cordon record, and
// is the node the drain recorded (not one recreated under its name).
func ByDrain(node *corev1.Node, nd *v1alpha1.NodeDrain) bool {
	return node.Annotations[v1alpha1.AnnotationCordonedBy] == v1alpha1.CordonedByValue(nd) &&
		(nd.Status.NodeUID == "" || nd.Status.NodeUID == string(node.UID))
}

// Cordon marks the node unschedulable for the drain and records it, with an
// optimistic lock on the node it was given (a conflict is returned as it
// is: the caller's copy was stale). A node already unschedulable is left as
// it is. It reports whether it changed the node; node is updated in place.
func Cordon(ctx context.Context, c client.Client, node *corev1.Node, nd *v1alpha1.NodeDrain) (bool, error) {
	if node.Spec.Unschedulable {
		return false, nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.Unschedulable = true
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[v1alpha1.AnnotationCordonedBy] = v1alpha1.CordonedByValue(nd)
	if err := c.Patch(ctx, node, patch); err != nil {
		return false, fmt.Errorf("cordoning node %s: %w", node.Name, err)
	}
	return true, nil
}

// Uncordon gives the node back if this drain cordoned it (ByDrain), and
// removes the record, under the same optimistic lock. It reports whether it
// changed the node.
func Uncordon(ctx context.Context, c client.Client, node *corev1.Node, nd *v1alpha1.NodeDrain) (bool, error) {
	if !ByDrain(node, nd) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.Unschedulable = false
	delete(node.Annotations, v1alpha1.AnnotationCordonedBy)
	if err := c.Patch(ctx, node, patch); err != nil {
		return false, fmt.Errorf("uncordoning node %s: %w", node.Name, err)
	}
	return true, nil
}
