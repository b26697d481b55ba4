package nodedrain

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/evacuationprovider"
	"github.com/vacate-dev/vacate/internal/hold"
)

// undoing is what an undo pass knows beyond the drain.
type undoing struct {
	// nodeGoing: the node is being deleted, or is gone. Nothing is
	// cancelled: what was moved off it stays moved.
	nodeGoing bool
	// expired: timeouts.cancel passed; whoever has not confirmed is no
	// longer waited for.
	expired bool
	limit   time.Duration
}

// keepsItsWork reports whether an evacuation is left done rather than
// cancelled: the node goes away, or it is a Decommission evacuation that
// finished (a Decommission moves data for good).
func keepsItsWork(ev *v1alpha1.Evacuation, u undoing) bool {
	if u.nodeGoing {
		return true
	}
	current := ev.Generation > 0 && ev.Status.ObservedGeneration == ev.Generation
	finished := ev.Spec.Release != nil || (current && ev.Status.Phase == v1alpha1.EvacuationCompleted && ev.Spec.Desired == v1alpha1.DesiredEvacuate)
	return ev.Spec.Mode == v1alpha1.ModeDecommission && finished
}

// cancelEvacuations asks every provider that worked for a drain of this
// node to undo it (desired: Cancel) while the drain is reversible, lets
// each Evacuation go once its provider reports Cancelled (or if it never
// took the request up, or its work is kept, or timeouts.cancel passed), and
// reports whether all are gone. Evacuations already being deleted (the
// drain deleted in the foreground, or someone deleted them) are cancelled
// the same way: vacate's finalizer keeps them until then.
func (r *Reconciler) cancelEvacuations(ctx context.Context, s *scope, u undoing) (bool, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return false, fmt.Errorf("listing Evacuations: %w", err)
	}
	var waiting []string
	var hooks []v1alpha1.HookStatus
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName != s.drain.Spec.NodeName || ev.ForEviction() {
			continue // another node's, or one pod's Eviction's: the coordinator undoes those
		}
		if !ev.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
			continue // going, and not held by vacate
		}
		h, err := r.cancelOne(ctx, s, ev, u)
		if err != nil {
			return false, err
		}
		if h != nil {
			waiting = append(waiting, ev.Name)
			hooks = append(hooks, *h)
		}
	}
	if len(waiting) > 0 {
		s.drain.Status.Hooks, s.drain.Status.HooksOmitted = boundHooks(hooks)
		s.found.cancelling = fmt.Sprintf("waiting for the providers to undo their evacuations before restoring the node (at most %s, timeouts.cancel): %s",
			u.limit, strings.Join(waiting, ", "))
		return false, nil
	}
	return true, nil
}

// deletedWhileRunning is how far the cancel of an Evacuation someone
// deleted while its drain runs may go: the node stays, and timeouts.cancel
// counts from the deletion.
func (r *Reconciler) deletedWhileRunning(s *scope, ev *v1alpha1.Evacuation) undoing {
	limit := s.policy.CancelTimeout
	return undoing{limit: limit, expired: s.now.Sub(ev.DeletionTimestamp.Time) >= limit}
}

// cancelOne asks one Evacuation's provider to undo it, and lets the
// Evacuation go (vacate's finalizer removed, deleted) once it may: the
// provider confirmed the cancel, or never took the request up, or is gone,
// or its work is kept, or timeouts.cancel passed. It returns the
// Evacuation's state while it waits, nil once it let it go.
func (r *Reconciler) cancelOne(ctx context.Context, s *scope, ev *v1alpha1.Evacuation, u undoing) (*v1alpha1.HookStatus, error) {
	waiting := &v1alpha1.HookStatus{Name: ev.Name, Phase: string(ev.CurrentPhase())}
	settled := evacuationprovider.CancelSettled(ev)
	untouched := ev.Status.ObservedGeneration == 0 && ev.Status.HeartbeatTime == nil
	provider := &v1alpha1.EvacuationProvider{}
	perr := r.Client.Get(ctx, types.NamespacedName{Name: ev.Spec.Provider}, provider)
	gone := apierrors.IsNotFound(perr)
	kept := keepsItsWork(ev, u)
	if settled || gone || kept || u.expired {
		switch {
		case settled:
		case kept:
			s.log.Info("leaving an evacuation's work in place: the drain is not reversible", "evacuation", klogRef(ev.Name), "nodeGoing", u.nodeGoing)
		case gone:
			r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventProviderGone, "Cancel",
				"EvacuationProvider %s is gone: nobody can undo Evacuation %s; deleting it", ev.Spec.Provider, ev.Name)
		default:
			r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
				"EvacuationProvider %s did not confirm the cancel of Evacuation %s within %s (timeouts.cancel); giving the node back without it: what it moved may stay moved",
				ev.Spec.Provider, ev.Name, u.limit)
		}
		// For an untouched one, the lock: a provider that took it up since
		// our cache saw it is asked to cancel instead.
		locked := untouched && !kept && !u.expired
		if err := r.letGo(ctx, ev, locked); apierrors.IsConflict(err) {
			return waiting, nil
		} else if err != nil {
			return nil, err
		}
		return nil, nil
	}
	if ev.Spec.Desired != v1alpha1.DesiredCancel {
		patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
		ev.Spec.Desired = v1alpha1.DesiredCancel
		if err := r.Client.Patch(ctx, ev, patch); apierrors.IsConflict(err) {
			return waiting, nil
		} else if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cancelling Evacuation %s: %w", ev.Name, err)
		}
	}
	if perr != nil {
		provider = nil
	}
	_, why, _ := hold.Judge(ev, provider, s.now)
	waiting.Phase, waiting.Message = string(ev.CurrentPhase()), truncate("cancelling: "+why, maxDetail)
	return waiting, nil
}

// letGo removes vacate's finalizer from an Evacuation and deletes it
// (evacuationprovider.LetGo).
func (r *Reconciler) letGo(ctx context.Context, ev *v1alpha1.Evacuation, locked bool) error {
	return evacuationprovider.LetGo(ctx, r.Client, ev, locked)
}
