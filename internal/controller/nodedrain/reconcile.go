package nodedrain

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/policy"
)

// Reconcile dispatches the stages of a drain, or its undo.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, req.NamespacedName, nd); err != nil {
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	s := &scope{drain: nd, now: r.Clock.Now(), since: r.waiters.now(), log: log.FromContext(ctx).WithValues("nodeDrain", klog.KObj(nd))}
	before := nd.DeepCopy()
	defer func() {
		if p := recover(); p != nil {
			panic(p) // a pass that broke off halfway records nothing
		}
		if s.withdraw {
			if _, werr := r.withdrawAll(ctx, s); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		s.setStatus()
		r.reportPods(s)
		r.reportDrain(s, &before.Status)
		if merr := r.markNode(ctx, s); merr != nil {
			err = errors.Join(err, merr)
		}
		now := time.Now()
		progress := !equality.Semantic.DeepEqual(before.Status, nd.Status) && len(s.onWritten)+len(s.podEvents) == 0 && progressOnly(&before.Status, &nd.Status)
		if progress {
			if wait := r.writes.wait(nd.UID, now); wait > 0 {
				name := nd.Name
				r.writes.holdBack(nd.UID, wait, func() { r.wake(name) }) // the progress is written then
				return
			}
		}
		written, perr := r.patchStatus(ctx, before, nd)
		if errors.Is(perr, errStatusConflict) {
			// The pass read an older version than the server's: it runs
			// again. Its watch event may not bring it: the newer version
			// may be this controller's own progress write, whose event
			// wakes no pass (progressUpdate).
			res.RequeueAfter, perr = requeue.ConflictRetry, nil
		}
		if perr != nil {
			err = errors.Join(err, perr)
		}
		if written {
			r.writes.wrote(nd.UID, now)
			for _, f := range s.onWritten {
				f()
			}
			r.recordPodEvents(s)
		}
	}()
	nd.Status.ObservedGeneration = nd.Generation

	if !nd.DeletionTimestamp.IsZero() || len(nd.Spec.Requesters) == 0 {
		return r.undo(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(nd, v1alpha1.FinalizerRestore) {
		if err := r.patchFinalizer(ctx, nd, controllerutil.AddFinalizer); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer to NodeDrain %s: %w", nd.Name, err)
		}
	}
	nd.Status.Deadline = v1alpha1.EarliestDeadline(nd.Spec.Requesters)
	if ended, err := r.ended(ctx, s); ended || err != nil {
		return reconcile.Result{}, err // undo when the requesters leave
	}
	nd.Status.Mode, nd.Status.UndoStartTime = nd.Mode(), nil
	recordRun(nd)
	for _, st := range []stage{r.loadNode, r.admitted, r.cordon, r.evacuate, r.timeouts, r.keepDaemonSetsOff, r.replacements,
		r.nextSteps, r.endpointAware, r.surgePods, r.requestEvictions, r.evict, r.finalize} {
		res, err := st(ctx, s)
		if err != nil || !res.IsZero() || s.stop {
			return res, err
		}
	}
	return reconcile.Result{}, nil
}

// ended reports whether the drain reached an end and stays there: Drained
// or Failed, for the node it ran on, and asked nothing its run did not
// answer. It runs again (runAgain) when what it is asked changed: its mode
// went up (node deletion raises Maintenance to Decommission), or, for a
// Failed drain, a requester joined or a requester's deadline changed. A
// Drained drain is kept empty while anyone asks: pods that must leave and
// turn up on the node afterwards (they tolerate the cordon, or were bound
// to it by name) run it again too; a requester that joins a Drained drain
// whose node is empty is answered at once. A drain whose node was replaced
// by another of the same name starts over there (loadNode); one whose node
// is gone stays as it ended.
func (r *Reconciler) ended(ctx context.Context, s *scope) (bool, error) {
	nd := s.drain
	if !nd.Ended() {
		return false, nil
	}
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	r.warnNoExecute(s, node) // an ended drain still says what the taint does
	if nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID) {
		return false, nil
	}
	switch reason, why := nd.RequestChange(); {
	case reason == v1alpha1.ReasonModeRaised, reason != "" && nd.Status.Phase == v1alpha1.PhaseFailed:
		r.runAgain(s, reason, why)
		return false, nil
	case nd.Status.Phase == v1alpha1.PhaseDrained:
		arrived, err := r.podsArrived(ctx, s, node)
		if err != nil {
			return true, err
		}
		if arrived != "" {
			r.runAgain(s, v1alpha1.ReasonPodsArrived, arrived)
			return false, nil
		}
	}
	recordRun(nd) // nothing new: the run answers the requesters there are now
	return true, nil
}

// recordRun records the requesters the drain's current run answers.
func recordRun(nd *v1alpha1.NodeDrain) {
	if nd.Status.Run == nil {
		nd.Status.Run = &v1alpha1.DrainRun{}
	}
	nd.Status.Run.Requesters = v1alpha1.RunRequestersOf(nd.Spec.Requesters)
}

// podsArrived says which pods that must leave are on a Drained drain's
// node ("" when none), planned as the drain plans them. A drain whose
// policy cannot be resolved now stays as it is: loadNode would hold it.
func (r *Reconciler) podsArrived(ctx context.Context, s *scope, node *corev1.Node) (string, error) {
	p, err := policy.Resolve(ctx, r.Client, s.drain.Spec.PolicyName, node)
	switch {
	case policy.IsNotFound(err), policy.IsAmbiguous(err):
		return "", nil
	case err != nil:
		return "", err
	}
	s.node = node
	s.policy, _ = p.WithOverrides(s.drain.Spec.Requesters)
	plan, err := r.plan(ctx, s)
	if err != nil || plan.Completed() {
		return "", err
	}
	var pods []string
	for _, d := range plan.Decisions {
		if d.Action != drain.Skip {
			pods = append(pods, d.Key())
		}
	}
	return fmt.Sprintf("%d pod(s) that must leave turned up on the node after it was Drained: %s", len(pods), listSome(pods, 5)), nil
}

// runAgain starts a new run of a drain that had ended, saying why. The
// run goes through admission again (the admission controller admits it
// within the policy's concurrency, first by its request time), its
// timeouts count from its new admission, and it is a new run in the HTTP
// evacuation protocol (an app's answer to the last run is not this one's).
// What the last run did stays: the cordon, the Evacuations (a Completed one
// whose spec does not change stays Completed), the hooks called (a cancel
// still reaches them), the counts.
func (r *Reconciler) runAgain(s *scope, reason, why string) {
	nd := s.drain
	st := &nd.Status
	was := st.Phase
	s.log.Info("running the drain again", "was", was, "reason", reason, "detail", why)
	st.RunNumber++ // admission takes the new run afresh (AdmittedRun)
	st.CompletionTime, st.RunID = nil, ""
	st.Run = &v1alpha1.DrainRun{Reason: reason, Message: condition.Cap(why)}
	msg := fmt.Sprintf("running again after it was %s: %s", was, why)
	s.found.again = &ending{reason, msg}
	s.afterWrite(func() {
		r.Events.Eventf(nd, nil, corev1.EventTypeNormal, v1alpha1.EventRunningAgain, "Drain", "%s", condition.Cap(msg))
	})
}

// patchFinalizer adds or removes vacate's finalizer. It patches a copy and
// takes back only the metadata, so the status this pass computed in memory is
// not replaced by the server's copy before patchStatus writes it.
func (r *Reconciler) patchFinalizer(ctx context.Context, nd *v1alpha1.NodeDrain, change func(ctrl.Object, string) bool) error {
	obj := nd.DeepCopy()
	patch := ctrl.MergeFrom(obj.DeepCopy())
	change(obj, v1alpha1.FinalizerRestore)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return err
	}
	nd.Finalizers, nd.ResourceVersion = obj.Finalizers, obj.ResourceVersion
	return nil
}

// errStatusConflict: the status was not written, the drain changed since
// the pass read it; the pass must run again.
var errStatusConflict = errors.New("the NodeDrain changed since it was read")

// patchStatus writes the status once, only if it changed, with an
// optimistic lock; on a conflict it returns errStatusConflict. It reports
// whether it wrote.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.NodeDrain) (bool, error) {
	if !after.DeletionTimestamp.IsZero() && len(after.Finalizers) == 0 {
		return true, nil // released: the object is going away with what it recorded
	}
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return false, nil
	}
	// The lock is against the latest version we know of, including this
	// pass's own writes (finalizer changes); anyone else's write conflicts.
	before = before.DeepCopy()
	before.ResourceVersion = after.ResourceVersion
	err := r.Client.Status().Patch(ctx, after, ctrl.MergeFromWithOptions(before, ctrl.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return false, nil // gone: nothing more to record
	}
	if apierrors.IsConflict(err) {
		return false, errStatusConflict
	}
	if err != nil {
		return false, fmt.Errorf("patching status of NodeDrain %s: %w", after.Name, err)
	}
	return true, nil
}
