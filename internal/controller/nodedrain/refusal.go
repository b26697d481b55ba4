package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
)

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
		r.reportEvicted(o) // events.go
		r.handOverNow(o)   // surge.go
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
	r.noticed.forget(node)
	return dropped
}

// reportPods publishes the pods the pass found blocked (vacate_pods_blocked)
// and makes each new refusal of their evictions a Warning event on the
// pod, and each new hold a Normal one (or a Warning, when the policy blocks
// it), once the status recording it is written: once per pod and blocker
// (noticed).
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
	node, ending := nd.Spec.NodeName, s.found.failed != nil || s.found.overdue != nil
	current := map[types.UID]string{}
	for _, b := range s.found.evicting.blockers {
		if b.pod != nil {
			current[b.pod.UID] = b.Reason
		}
	}
	r.noticed.keep(node, current)
	for _, b := range s.found.evicting.blockers {
		switch {
		case b.pod == nil || r.noticed.told(node, b.pod.UID, b.Reason):
		case b.refused:
			s.podEvent(nd, b.pod, corev1.EventTypeWarning, v1alpha1.EventEvictionBlocked, "Evict", b.Reason,
				fmt.Sprintf("eviction refused (NodeDrain %s): %s", nd.Name, b.Detail))
		case b.hold != "" && !ending: // a pod the ending pass leaves or deletes is not held
			s.podEvent(nd, b.pod, b.hold, v1alpha1.EventEvictionHeld, b.Reason, b.Reason, holdNote(nd, b.Blocker))
		}
	}
}
