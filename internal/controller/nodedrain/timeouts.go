package nodedrain

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// timeouts ends a drain that ran out of time while pods must still leave
// or evacuations after eviction are not Completed (timeout); a drain with
// time left goes on to evict.
func (r *Reconciler) timeouts(ctx context.Context, s *scope) (reconcile.Result, error) {
	s.timeLeft = timeLeft(s)
	reason, why, over := overdue(s)
	if !over {
		return reconcile.Result{}, nil
	}
	plan, err := r.plan(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if plan.Completed() && len(s.evac.pending) == 0 {
		return reconcile.Result{}, nil // everything left: finalize
	}
	return r.timeout(ctx, s, plan, reason, why)
}

// overdue says whether the drain ran out of time: past timeouts.drain, with
// an evacuation past timeouts.evacuation, or, under onTimeout ForceDelete,
// past a requester's deadline (the machine goes away then: what is left is
// deleted). reason and why say which. Under Fail a deadline never ends the
// drain: stopping would leave the pods on a machine that goes, less than
// the drain would do without a deadline; it drains on as fast as its
// PodDisruptionBudgets allow, bounded by timeouts.drain.
func overdue(s *scope) (reason, why string, over bool) {
	if d := s.drain.Status.Deadline; d != nil && s.policy.ForceDelete && !s.now.Before(d.Time.Time) {
		return v1alpha1.ReasonDeadlinePassed, fmt.Sprintf("the drain did not finish by %s, the deadline of requester %s",
			d.Time.UTC().Format(time.RFC3339), d.Requester), true
	}
	if st := s.drain.Status.StartTime; s.policy.DrainTimeout > 0 && st != nil && s.now.Sub(st.Time) >= s.policy.DrainTimeout {
		return v1alpha1.ReasonDrainTimeout, fmt.Sprintf("the drain did not finish within %s (timeouts.drain)", s.policy.DrainTimeout), true
	}
	if len(s.evac.timedOut) > 0 {
		return v1alpha1.ReasonEvacuationTimedOut, "evacuation(s) past timeouts.evacuation: " + strings.Join(s.evac.timedOut, "; "), true
	}
	return "", "", false
}

// timeLeft is how long an evicting drain waits for its next pass when no
// event comes: the resync, or the drain timeout or deadline if sooner.
func timeLeft(s *scope) time.Duration {
	wait := requeue.Resync
	if s.policy.DrainTimeout > 0 && s.drain.Status.StartTime != nil {
		if left := s.drain.Status.StartTime.Add(s.policy.DrainTimeout).Sub(s.now); left > 0 {
			wait = min(wait, left)
		}
	}
	if d := s.drain.Status.Deadline; d != nil && s.policy.ForceDelete {
		if left := d.Time.Sub(s.now); left > 0 {
			wait = min(wait, left)
		}
	}
	return wait
}

// timeout ends a drain that ran out of time. Under onTimeout: Fail it is
// Failed with the pods in place. Under ForceDelete, only when the policy
// says so, it deletes the pods that must leave, except the ones it never
// deletes: pods an unfinished evacuation or HTTP hook protects (safety
// invariant 3) and pods annotated wait-completed; once nothing more can
// leave, the drain is Drained if nothing was spared, else Failed naming the
// spared pods. Either way it reaches a final phase.
func (r *Reconciler) timeout(ctx context.Context, s *scope, plan drain.Plan, reason, why string) (reconcile.Result, error) {
	found := s.podsFound(plan) // no step was taken: what is known of each pod says what holds it
	for _, d := range plan.Decisions {
		if d.Action != drain.Evict {
			continue
		}
		p := podStep{Decision: d, key: d.Key(), rec: r.recordOf(d.Pod.UID)}
		if holder, held := s.evac.holds.Of(d.Pod); held {
			p.step, p.holder = drain.StepHeld, holder
		}
		if b, ok := s.stepBlocker(p); ok {
			found.blockers = append(found.blockers, b)
		}
	}
	s.found.evicting = found
	if s.policy.ForceDelete {
		deleted, leaving, err := r.forceDelete(ctx, s, plan, why)
		if apierrors.IsForbidden(err) {
			// Retrying cannot help: the right is missing (or an admission
			// policy refuses). End the drain saying what to bind.
			r.fail(s, v1alpha1.ReasonForceDeleteForbidden, fmt.Sprintf("%s; onTimeout ForceDelete, but %v; bind the ClusterRole "+
				"vacate-controller-force-delete to the controller ('vacate manifests force-delete | kubectl apply -f -')", why, err))
			return reconcile.Result{}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if deleted+leaving > 0 {
			s.found.overdue = &ending{reason, fmt.Sprintf("%s; remaining pods deleted (policy onTimeout: ForceDelete)", why)}
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		spared := sparedPods(s, plan)
		if len(spared) == 0 && len(s.evac.pending) == 0 {
			return reconcile.Result{}, nil // everything left: finalize
		}
		why += "; onTimeout ForceDelete deleted every pod it may"
		if len(spared) > 0 {
			why += ", and will not delete " + listSome(spared, 5)
		}
		if len(s.evac.pending) > 0 {
			why += "; unfinished: " + strings.Join(s.evac.pending, "; ")
		}
	} else {
		why += ": " + plan.ConditionMessage()
	}
	r.fail(s, reason, why)
	return reconcile.Result{}, nil
}

// fail ends the drain Failed, with the pods that are left in place.
func (r *Reconciler) fail(s *scope, reason, msg string) {
	nd := s.drain
	r.forgetNode(nd.Spec.NodeName)
	s.withdraw = true // the pods are left in place: nobody evicts them for this drain
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	nd.Status.CompletionTime = &metav1.Time{Time: s.now}
	msg = condition.Cap(msg)
	s.found.failed = &ending{reason, msg}
	policyName, node := nd.Status.Policy, s.eventNode()
	s.afterWrite(func() {
		r.drainEvent(nd, nil, corev1.EventTypeWarning, v1alpha1.EventFailed, "Drain", "%s", msg)
		// The drain's message may quote its providers; the node's says
		// where to look.
		r.nodeEvent(node, nd, corev1.EventTypeWarning, v1alpha1.EventFailed, "Drain",
			"NodeDrain %s failed (%s); the pods left stay: kubectl describe nodedrain %s says why", nd.Name, reason, nd.Name)
		metrics.DrainsTotal.WithLabelValues(string(v1alpha1.PhaseFailed), policyName).Inc()
	})
	s.stop = true
}

// forceDelete deletes the pods that must leave and may be deleted, and
// reports how many it deleted and how many are still on their way out.
func (r *Reconciler) forceDelete(ctx context.Context, s *scope, plan drain.Plan, why string) (deleted, leaving int, _ error) {
	nd := s.drain
	for _, d := range plan.Decisions {
		if d.Action == drain.Wait && d.Reason == drain.ReasonTerminating {
			leaving++
			continue
		}
		if d.Action != drain.Evict && d.Action != drain.Block {
			continue
		}
		if _, held := s.evac.holds.Of(d.Pod); held {
			continue // safety invariant 3: never before its evacuation is Completed
		}
		s.log.Info("deleting pod after a timeout (policy onTimeout: ForceDelete)", "pod", klogRef(d.Key()), "why", why)
		err := r.Client.Delete(ctx, d.Pod, ctrl.Preconditions{UID: &d.Pod.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return deleted, leaving, fmt.Errorf("deleting pod %s after a timeout: %w", d.Key(), err)
		}
		deleted++
		r.podWarning(nd, d.Pod, v1alpha1.EventForceDeleted, "Delete",
			"deleted pod %s: %s (policy onTimeout: ForceDelete)", d.Key(), why)
	}
	return deleted, leaving, nil
}

// sparedPods are the pods that must leave but that ForceDelete never
// deletes, each with why.
func sparedPods(s *scope, plan drain.Plan) []string {
	var out []string
	for _, d := range plan.Decisions {
		switch b, held := s.evac.holds.Of(d.Pod); {
		case held:
			out = append(out, fmt.Sprintf("%s (held by %s)", d.Key(), b.Holder))
		case d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion:
			out = append(out, d.Key()+" (annotated "+drain.PodAnnotation+": "+drain.AnnotationWaitCompleted+")")
		}
	}
	return out
}
