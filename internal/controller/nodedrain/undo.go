package nodedrain

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/cordon"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
)

// uncordon gives the node back if vacate cordoned it for this drain (the
// annotation names it): schedulable again, annotation removed. A conflict
// is returned as such, for the caller to retry.
func (r *Reconciler) uncordon(ctx context.Context, s *scope, node *corev1.Node) error {
	if !s.drain.Cordoned(node) {
		return nil
	}
	s.log.Info("uncordoning node that vacate cordoned", "node", klogRef(node.Name))
	if _, err := cordon.Uncordon(ctx, r.Client, node, s.drain); err != nil {
		return err
	}
	r.drainEvent(s.drain, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Uncordon", "uncordoned node %s", node.Name)
	return nil
}

// undoing says how far the undo may go: whether the node is going away
// (nothing is cancelled then) and whether timeouts.cancel has passed. The
// bound comes from the node's policy; the default when it cannot be read.
func (r *Reconciler) undoing(ctx context.Context, s *scope, node *corev1.Node, nodeGone bool) undoing {
	u := undoing{nodeGoing: nodeGone || !node.DeletionTimestamp.IsZero(), limit: policy.DefaultCancelTimeout}
	var n *corev1.Node
	if !nodeGone {
		n = node
	}
	if p, err := policy.Resolve(ctx, r.Client, s.drain.Spec.PolicyName, n); err == nil {
		u.limit = p.CancelTimeout
	}
	u.expired = s.now.Sub(s.drain.Status.UndoStartTime.Time) >= u.limit
	return u
}

// undo stops the drain and restores exactly what vacate changed: it
// uncordons the node only if vacate cordoned it (the annotation names this
// drain), removes vacate's annotation, then releases the finalizer.
func (r *Reconciler) undo(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	if !controllerutil.ContainsFinalizer(nd, v1alpha1.FinalizerRestore) {
		return reconcile.Result{}, nil
	}
	wasActive := nd.Status.Phase != "" && nd.Status.Phase != v1alpha1.PhasePending
	cancelled := wasActive && !nd.Ended() && nd.Status.Phase != v1alpha1.PhaseRestoring
	s.found.undoing = true
	if nd.Status.UndoStartTime == nil {
		nd.Status.UndoStartTime = &metav1.Time{Time: s.now}
	}
	dropped := r.forgetNode(nd.Spec.NodeName)
	r.blocked.set(nd.Name)

	// A fresh read, not the cache: a cordon patched an instant ago may not
	// be in the cache yet, and must still be undone.
	node := &corev1.Node{}
	err := r.fresh().Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	nodeGone := apierrors.IsNotFound(err)
	u := r.undoing(ctx, s, node, nodeGone)
	// The providers undo their evacuations before the node is given back,
	// within timeouts.cancel.
	wait := min(requeue.Resync, max(nd.Status.UndoStartTime.Add(u.limit).Sub(s.now), time.Second))
	if gone, err := r.cancelEvacuations(ctx, s, u); err != nil || !gone {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	if acked, err := r.cancelHooks(ctx, s, u); err != nil || !acked {
		return reconcile.Result{RequeueAfter: min(wait, 2*time.Second)}, err
	}
	if over, err := r.withdrawRequests(ctx, s, u); err != nil || !over {
		return reconcile.Result{RequeueAfter: min(wait, 2*time.Second)}, err
	}
	// Replacements whose pod stays are removed; those whose pod left go
	// to its ReplicaSet (surge.go). A removal the Eviction API refuses is
	// tried until timeouts.cancel; then the replacement is left in place,
	// reported, and the node given back.
	if pending, err := r.tendSurges(ctx, s, nil, true); err != nil {
		return reconcile.Result{}, err
	} else if pending > 0 && !u.expired {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	} else if pending > 0 {
		if err := r.leaveReplacements(ctx, s, u.limit); err != nil {
			return reconcile.Result{}, err
		}
	}
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	if !nodeGone && (nd.Status.NodeUID == "" || nd.Status.NodeUID == string(node.UID)) {
		if _, err := cordon.SetDrainConditions(ctx, r.Client, node, nil, s.now); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !nodeGone {
		if changed, err := cordon.LetDaemonSetsBack(ctx, r.Client, node, nd); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		} else if changed {
			r.drainEvent(nd, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Untaint",
				"removed the taint %s from node %s: DaemonSets may put their pods back", v1alpha1.TaintDaemonSetsOff, node.Name)
		}
	}
	switch {
	case nodeGone:
	case nd.Cordoned(node):
		if err := r.uncordon(ctx, s, node); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
	default:
		if wasActive {
			r.drainEvent(nd, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Restore",
				"left node %s as it was: vacate did not cordon it", node.Name)
		}
	}
	if cancelled {
		log, policyName := s.log, nd.Status.Policy
		s.afterWrite(func() {
			metrics.DrainsTotal.WithLabelValues(metrics.ResultCancelled, policyName).Inc()
			log.Info("drain cancelled and undone", "droppedEvictions", dropped)
		})
	}
	if !nd.DeletionTimestamp.IsZero() {
		if err := r.patchFinalizer(ctx, nd, controllerutil.RemoveFinalizer); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("releasing finalizer of NodeDrain %s: %w", nd.Name, err)
		}
		return reconcile.Result{}, nil
	}
	idle(s)
	if err := r.patchFinalizer(ctx, nd, controllerutil.RemoveFinalizer); err != nil {
		return reconcile.Result{}, fmt.Errorf("releasing finalizer of NodeDrain %s: %w", nd.Name, err)
	}
	return reconcile.Result{}, nil
}

// idle records a drain undone whose object stays: no requester is left, and
// it is Pending until one returns. A requester that returns starts a new
// drain, counted from zero.
func idle(s *scope) {
	nd := s.drain
	nd.Status.Blockers, nd.Status.Blocked, nd.Status.BlockersOmitted, nd.Status.Hooks = nil, 0, 0, nil
	nd.Status.HooksOmitted, nd.Status.HookCalls, nd.Status.RunID = 0, nil, "" // the next request is a new run
	nd.Status.Total, nd.Status.Evicted, nd.Status.Remaining, nd.Status.Progress = 0, 0, 0, ""
	// A request that comes back is a new run, admitted afresh: counted once,
	// when the run being undone had begun (its stages ran, or admission
	// looked at it).
	if nd.Status.Run != nil || nd.AdmissionCurrent() && meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted) != nil {
		nd.Status.RunNumber++
	}
	nd.Status.CompletionTime, nd.Status.UndoStartTime, nd.Status.Mode, nd.Status.Deadline, nd.Status.Run = nil, nil, "", nil, nil
	restored := "no requester is left; vacate undid its changes"
	if left := s.surge.leftMessage(); left != "" {
		restored += "; " + left
	}
	s.found.restored = restored
}
