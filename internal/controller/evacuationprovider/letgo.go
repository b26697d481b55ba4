package evacuationprovider

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// CancelSettled reports whether an Evacuation needs no cancel from its
// provider: it never took the request up (no answer, no heartbeat), or it
// confirmed the cancel of the current request.
func CancelSettled(ev *v1alpha1.Evacuation) bool {
	untouched := ev.Status.ObservedGeneration == 0 && ev.Status.HeartbeatTime == nil
	cancelled := ev.Status.Phase == v1alpha1.EvacuationCancelled && ev.Status.ObservedGeneration == ev.Generation &&
		ev.Spec.Desired == v1alpha1.DesiredCancel
	return untouched || cancelled
}

// LetGo removes vacate's finalizer vacate.dev/cancel from an Evacuation
// and deletes it: the NodeDrain controller when a drain is undone, the
// EvictionRequest coordinator when a pod's Eviction ends. With locked,
// both only happen to the version the caller read (a conflict, returned
// as is, says it changed).
func LetGo(ctx context.Context, c client.Client, ev *v1alpha1.Evacuation, locked bool) error {
	if controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
		opts := []client.MergeFromOption{}
		if locked {
			opts = append(opts, client.MergeFromWithOptimisticLock{})
		}
		patch := client.MergeFromWithOptions(ev.DeepCopy(), opts...)
		controllerutil.RemoveFinalizer(ev, v1alpha1.FinalizerCancel)
		if err := c.Patch(ctx, ev, patch); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("releasing Evacuation %s: %w", ev.Name, err)
		}
	}
	if !ev.DeletionTimestamp.IsZero() {
		return nil // removing the finalizer let it go
	}
	pre := client.Preconditions{UID: &ev.UID}
	if locked {
		pre.ResourceVersion = &ev.ResourceVersion
	}
	if err := c.Delete(ctx, ev, pre); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("deleting Evacuation %s: %w", ev.Name, err)
	}
	return nil
}
