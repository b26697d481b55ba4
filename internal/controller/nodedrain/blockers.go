package nodedrain

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// podsFound is what the evict stage found of the plan's pods: its counts,
// and the pods that hold the drain up (status.go writes both): the
// planner's decisions, and the pods' steps (stepBlocker).
func (s *scope) podsFound(plan drain.Plan) *podCounts {
	found := &podCounts{completed: plan.Completed(), remaining: int32(plan.Remaining()), summary: plan.ConditionMessage()}
	for _, d := range plan.Decisions {
		if d.Action == drain.Evict {
			continue // its step says
		}
		b := v1alpha1.Blocker{Pod: d.Key(), Since: metav1.NewTime(s.now)}
		if held, ok := s.evac.holds.Of(d.Pod); ok {
			found.blockers = append(found.blockers, podBlocker{Blocker: held, pod: d.Pod, hold: corev1.EventTypeNormal})
		} else if d.Action == drain.Block || d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion {
			b.Reason, b.Detail = string(d.Reason), d.Detail
			hold := corev1.EventTypeNormal
			if d.Action == drain.Block {
				hold = corev1.EventTypeWarning // a person must act
			}
			found.blockers = append(found.blockers, podBlocker{Blocker: b, pod: d.Pod, hold: hold})
		}
	}
	for _, p := range s.steps {
		if b, ok := s.stepBlocker(p); ok {
			found.blockers = append(found.blockers, b)
		}
	}
	if d := s.drain.Status.Deadline; d != nil && !s.policy.ForceDelete && !s.now.Before(d.Time.Time) {
		found.pastDeadline = d
	}
	return found
}

// podBlocker is what holds a pod up; refused: the API server refused its
// eviction (a new one is also a Warning event on the pod); hold, when set,
// is the type of the event on the pod that a new hold is: vacate holds it
// back on purpose (its evacuation, HTTP hook, endpoints or EvictionRequest,
// a Job to complete) or the policy blocks it (a Warning: a person must
// act). A pod that waits for its PDB's budget is neither: most pods of a
// drain do, at some moment.
type podBlocker struct {
	v1alpha1.Blocker
	refused bool
	hold    string
	pod     *corev1.Pod
}

// stepBlocker says whether a pod the planner evicts holds the drain up
// after its step, and how: a hold (its evacuation or HTTP hook), its
// endpoints or its surge, or its eviction's last refusal (read before the
// step), its EvictionRequest's progress, or a PodDisruptionBudget the plan
// sees allowing no disruption.
func (s *scope) stepBlocker(p podStep) (podBlocker, bool) {
	if p.step == drain.StepHeld {
		return podBlocker{Blocker: p.holder, pod: p.Pod, hold: corev1.EventTypeNormal}, true
	}
	if b, ok := s.gated[p.Pod.UID]; ok {
		return podBlocker{Blocker: b, pod: p.Pod, hold: corev1.EventTypeNormal}, true
	}
	if b, ok := s.surging[p.Pod.UID]; ok {
		return podBlocker{Blocker: b, pod: p.Pod}, true
	}
	b, rec := v1alpha1.Blocker{Pod: p.key, Since: metav1.NewTime(s.now)}, p.rec
	if asked, ok := s.requested[p.Pod.UID]; ok && !rec.Refused { // its Eviction's own call, refused, says more
		return podBlocker{Blocker: asked, pod: p.Pod, hold: corev1.EventTypeNormal}, true
	}
	switch {
	case rec.Evicted:
		// Evicted, and the cache does not show it terminating yet: the
		// PDB's status, already updated by that eviction, allows no
		// disruption, but nothing holds this pod.
		return podBlocker{}, false
	case rec.Refused && rec.Refusal.Result != eviction.PDBBlocked:
		return podBlocker{Blocker: refusalBlocker(b, p.Decision, rec.Refusal), refused: true, pod: p.Pod}, true
	case rec.Refused || p.PDBBlocked:
		return podBlocker{Blocker: pdbBlocker(b, p.Decision, rec.Refusal, rec.Refused), refused: rec.Refused, pod: p.Pod}, true
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
	case ref.MultiplePDBs && len(d.PDBs) > 1:
		b.Reason, b.Holder = v1alpha1.BlockerMultiplePDBs, "PodDisruptionBudget "+strings.Join(d.PDBs, ", ")
	default:
		b.Reason = v1alpha1.BlockerFailed
	}
	return b
}
