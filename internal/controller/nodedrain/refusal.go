package nodedrain

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// resolvedBy says whether what refused the pod's eviction has since
// changed in a way the plan shows, so the eviction is worth trying at once
// rather than at the end of its backoff: a PodDisruptionBudget that allows
// a disruption now, or a pod that more than one PDB no longer selects. A
// pod already tried at once is not tried at once again until its PDBs'
// status (pdbState) changes, nor while that try is unanswered. Other
// refusals (throttling, denials, failures) wait for their backoff.
func resolvedBy(ref eviction.Refusal, d drain.Decision, pdbState string) bool {
	switch {
	case ref.Retrying, ref.RetriedAt != "" && ref.RetriedAt == pdbState:
		return false
	case ref.Result == eviction.PDBBlocked:
		return !d.PDBBlocked
	case multiplePDBs(ref):
		return len(d.PDBs) <= 1
	}
	return false
}

// multiplePDBs says whether the refusal is the Eviction API's answer to a
// pod that more than one PodDisruptionBudget selects: a 500. Only the
// caller knows the pod's PDBs; the message is never read.
func multiplePDBs(ref eviction.Refusal) bool {
	return ref.Result == eviction.Failed && ref.Code == http.StatusInternalServerError
}

// OnOutcome takes the eviction queue's answer for a pod (the queue keeps
// its refusal): a pod out of service whose eviction was refused goes back
// in service, replacements are handed over, and the node's drain is woken.
func (r *Reconciler) OnOutcome(o eviction.Outcome) {
	if o.Result == eviction.Held {
		metrics.EvictionsHeld.Inc()
	} else {
		metrics.EvictionsTotal.WithLabelValues(string(o.Result)).Inc()
	}
	// The queue recorded the answer (its refusal, or the end of the
	// eviction) before it called.
	switch {
	case o.Result == eviction.Evicted || o.Result == eviction.Gone:
		if r.gates.done(o.UID) && o.Result == eviction.Evicted {
			metrics.OutOfService.WithLabelValues(string(eviction.Evicted)).Inc()
		}
	case r.gates.refused(o):
		r.Evictions.Forget(o.UID) // it goes back in service first (endpoints.go)
	}
	if o.Result == eviction.Evicted {
		r.handOverNow(o) // surge.go
	}
	if o.Result == eviction.Evicted && !r.seenLeaving(o) {
		return // the pod's watch event, still to come, brings the next pass
	}
	r.wake(o.Node)
}

// seenLeaving says whether the cache already shows the evicted pod
// terminating or gone: its watch event came before this outcome was
// recorded, and woke a pass that may not have seen the outcome. Otherwise
// the event is still to come (the cache changes before its handlers run)
// and wakes the drain itself; an extra pass now would find nothing new (at
// 10,000 pods, one pass in four was such a pass).
func (r *Reconciler) seenLeaving(o eviction.Outcome) bool {
	pod := &corev1.Pod{}
	if err := r.Client.Get(context.Background(), o.Pod, pod); err != nil {
		return true // gone, or unreadable: wake to be safe
	}
	return pod.UID != o.UID || !pod.DeletionTimestamp.IsZero()
}

// forgetNode drops the node's queued evictions and what is remembered of
// its pods (the queue's evictions, reservations and refusals; gates;
// refused surges): the drain ended, failed, was held or cancelled. It returns how many queued
// evictions it dropped.
func (r *Reconciler) forgetNode(node string) int {
	dropped := r.Evictions.ForgetNode(node)
	r.gates.forgetNode(node)
	r.surgeRefused.forgetNode(node)
	r.waiters.forget(node)
	return dropped
}

// reportPods publishes the pods the pass found blocked (vacate_pods_blocked)
// and makes each new refusal of their evictions a Warning event on the
// drain, once the status recording it is written.
func (r *Reconciler) reportPods(s *scope) {
	if s.found.evicting == nil {
		return
	}
	nd := s.drain
	reasons := make([]string, 0, len(nd.Status.Blockers))
	for _, b := range nd.Status.Blockers {
		reasons = append(reasons, b.Reason)
	}
	r.blocked.set(nd.Name, reasons...)
	for _, b := range s.newRefusals {
		pod, msg := b.pod, fmt.Sprintf("eviction of %s refused: %s", b.Pod, b.Detail)
		s.afterWrite(func() {
			r.Events.Eventf(nd, pod, corev1.EventTypeWarning, v1alpha1.EventEvictionBlocked, "Evict", "%s", msg)
		})
	}
}

// podBlocker is what holds a pod up; refused: the API server refused its
// eviction (a new one is also a Warning event on the drain).
type podBlocker struct {
	v1alpha1.Blocker
	refused bool
	pod     *corev1.Pod
}

// blockerOf says whether the pod holds the drain up after its step, and
// how: a hold (its evacuation or HTTP hook), its endpoints or its surge,
// the planner's decision, or its eviction's last refusal (rec, read before
// the step).
func (s *scope) blockerOf(d drain.Decision, rec podRecord) (podBlocker, bool) {
	if b, ok := s.evac.holds.Of(d.Pod); ok {
		return podBlocker{Blocker: b}, true
	}
	if b, ok := s.gated[d.Pod.UID]; ok {
		return podBlocker{Blocker: b}, true
	}
	if b, ok := s.surging[d.Pod.UID]; ok {
		return podBlocker{Blocker: b}, true
	}
	b := v1alpha1.Blocker{Pod: d.Key(), Since: metav1.NewTime(s.now)}
	switch {
	case d.Action == drain.Block, d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion:
		b.Reason, b.Detail = string(d.Reason), d.Detail
		return podBlocker{Blocker: b}, true
	case d.Action != drain.Evict, rec.Evicted:
		// Evicted, and the cache does not show it terminating yet: the
		// PDB's status, already updated by that eviction, allows no
		// disruption, but nothing holds this pod.
		return podBlocker{}, false
	case rec.Refused && rec.Refusal.Result != eviction.PDBBlocked:
		return podBlocker{Blocker: refusalBlocker(b, d, rec.Refusal), refused: true, pod: d.Pod}, true
	case rec.Refused || d.PDBBlocked:
		return podBlocker{Blocker: pdbBlocker(b, d, rec.Refusal, rec.Refused), refused: rec.Refused, pod: d.Pod}, true
	}
	return podBlocker{}, false
}

// pdbBlocker is the blocker of a pod a PodDisruptionBudget holds: one
// refused its eviction, or the plan sees one allowing no disruption now.
func pdbBlocker(b v1alpha1.Blocker, d drain.Decision, ref eviction.Refusal, refused bool) v1alpha1.Blocker {
	b.Reason = v1alpha1.BlockerPDB
	pdbs := d.BlockingPDBs
	if len(pdbs) == 0 { // refused while the cached PDB status still allowed it
		pdbs = d.PDBs
	}
	b.Holder = "PodDisruptionBudget " + strings.Join(pdbs, ", ")
	b.Detail = b.Holder + " allows no disruption now"
	if refused {
		b.Since = metav1.NewTime(ref.Since)
		if ref.Message != "" {
			b.Detail = b.Holder + ": " + ref.Message
		}
	}
	return b
}

// refusalBlocker is the blocker of a pod whose eviction the API server
// refused for a reason other than a PodDisruptionBudget: the detail is the
// API server's own message.
func refusalBlocker(b v1alpha1.Blocker, d drain.Decision, ref eviction.Refusal) v1alpha1.Blocker {
	b.Since, b.Detail = metav1.NewTime(ref.Since), ref.Message
	switch {
	case ref.Result == eviction.Throttled:
		b.Reason, b.Holder = v1alpha1.BlockerThrottled, v1alpha1.HolderThrottling
	case ref.Result == eviction.Forbidden:
		b.Reason = v1alpha1.BlockerForbidden
	case ref.Result == eviction.Invalid:
		b.Reason = v1alpha1.BlockerInvalid
	case multiplePDBs(ref) && len(d.PDBs) > 1:
		b.Reason, b.Holder = v1alpha1.BlockerMultiplePDBs, "PodDisruptionBudget "+strings.Join(d.PDBs, ", ")
	default:
		b.Reason = v1alpha1.BlockerFailed
	}
	return b
}
