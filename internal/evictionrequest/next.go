package evictionrequest

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// HeartbeatDeadline is how long an Active responder may go without a
// heartbeat before its turn passes to the next: fixed by the API server's
// validation, which refuses an earlier interruption.
const HeartbeatDeadline = 20 * time.Minute

// maxRequesters is the API's limit on an Eviction's status.requesters.
const maxRequesters = 100

// Facts is what the coordinator knows of one target pod.
type Facts struct {
	// Pod is the target, nil once it is gone (deleted, or replaced by a pod
	// of the same name with another UID).
	Pod *corev1.Pod
	// Requests are the EvictionRequests for the target (its UID).
	Requests []lifecyclev1alpha1.EvictionRequest
	// Eviction is the target's Eviction as stored, nil before it exists.
	Eviction *lifecyclev1alpha1.Eviction
	Now      time.Time
}

// Next is the coordinator's one decision for a target: the Eviction's next
// status, computed from the facts alone, and whether the imperative evictor's
// turn has come (the caller evicts the pod through vacate's eviction queue).
// It changes nothing. A final Eviction (TargetEvicted or Failed) only
// records its requesters.
func Next(f Facts) (status lifecyclev1alpha1.EvictionStatus, evict bool) {
	if f.Eviction != nil {
		status = *f.Eviction.Status.DeepCopy()
		status.ObservedGeneration = observed(status.ObservedGeneration, f.Eviction.Generation)
		// Another writer may have stored them in any order; turns follow
		// the API's order whatever the list's.
		Order(status.TargetResponders)
	}
	status.Requesters = requesters(status.Requesters, f.Requests)
	if final(status) {
		return status, false
	}
	now := metav1.NewTime(f.Now)
	switch {
	case f.Pod == nil:
		endActive(&status, now, lifecyclev1alpha1.ResponderStateCanceled)
		setCondition(&status, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodDeleted, "the pod is gone", now)
		return status, false
	case f.Pod.Status.Phase == corev1.PodSucceeded || f.Pod.Status.Phase == corev1.PodFailed:
		endActive(&status, now, lifecyclev1alpha1.ResponderStateCanceled)
		setCondition(&status, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodTerminal, "the pod is "+string(f.Pod.Status.Phase), now)
		return status, false
	case !wanted(status.Requesters):
		if len(status.TargetResponders) > 0 {
			endActive(&status, now, lifecyclev1alpha1.ResponderStateCanceled)
			setCondition(&status, lifecyclev1alpha1.EvictionConditionFailed, lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters, "every requester withdrew", now)
		}
		return status, false
	case len(status.TargetResponders) == 0:
		status.TargetResponders = TargetResponders(f.Pod)
		status.Responders = make([]lifecyclev1alpha1.ResponderStatus, len(status.TargetResponders))
		for i, r := range status.TargetResponders {
			status.Responders[i].Name = r.Name
		}
		activate(&status, 0, now)
	}
	return handOver(status, now)
}

// handOver passes the turn on from an Active responder that completed, or
// whose heartbeat is older than HeartbeatDeadline, and says whether the
// evictor's turn has come.
func handOver(status lifecyclev1alpha1.EvictionStatus, now metav1.Time) (lifecyclev1alpha1.EvictionStatus, bool) {
	i := activeIndex(status)
	if i < 0 {
		return noneActive(status, now), false
	}
	r := ResponderStatus(&status, status.TargetResponders[i].Name)
	switch {
	case r.CompletionTime != nil:
		status.TargetResponders[i].State = lifecyclev1alpha1.ResponderStateCompleted
	case !now.Time.Before(lastHeard(r).Add(HeartbeatDeadline)):
		status.TargetResponders[i].State = lifecyclev1alpha1.ResponderStateInterrupted
	default:
		return status, status.TargetResponders[i].Name == Evictor
	}
	if i+1 == len(status.TargetResponders) {
		return noneActive(status, now), false
	}
	activate(&status, i+1, now)
	return status, status.TargetResponders[i+1].Name == Evictor
}

// noneActive ends an Eviction in which every responder has had its turn. When
// the evictor's turn ended Completed it evicted the pod, which may still be
// terminating (or seen so late): the pod's end records TargetEvicted. Any
// other way, no responder is left to evict the pod.
func noneActive(status lifecyclev1alpha1.EvictionStatus, now metav1.Time) lifecyclev1alpha1.EvictionStatus {
	if n := len(status.TargetResponders); n > 0 {
		last := status.TargetResponders[n-1]
		if last.Name == Evictor && last.State == lifecyclev1alpha1.ResponderStateCompleted {
			return status
		}
	}
	setCondition(&status, lifecyclev1alpha1.EvictionConditionFailed, lifecyclev1alpha1.EvictionConditionReasonNoFurtherResponder, "no responder is left to evict the pod", now)
	return status
}

// observed is the observedGeneration to write: generation, never less than
// the one stored (the API requires it to grow), and never a generation the
// object does not have yet (0, before it is stored).
func observed(stored *int64, generation int64) *int64 {
	if generation <= 0 {
		return stored
	}
	return ptr.To(max(generation, ptr.Deref(stored, 0)))
}

// requesters merges the requests into the recorded requesters: a requester
// whose request is gone has withdrawn. Withdrawn requesters are dropped
// first when there are more than the API allows.
func requesters(recorded []lifecyclev1alpha1.Requester, requests []lifecyclev1alpha1.EvictionRequest) []lifecyclev1alpha1.Requester {
	intents := map[string]lifecyclev1alpha1.RequesterIntent{}
	for _, r := range recorded {
		intents[r.Name] = lifecyclev1alpha1.RequesterIntentWithdrawn
	}
	// A requester with several requests wants the eviction while one of
	// them does, whatever order they are listed in.
	for _, r := range requests {
		if intents[r.Spec.Requester] == lifecyclev1alpha1.RequesterIntentEviction {
			continue // an earlier request of this requester wants it
		}
		intent := lifecyclev1alpha1.RequesterIntentWithdrawn
		if r.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction && r.DeletionTimestamp == nil {
			intent = lifecyclev1alpha1.RequesterIntentEviction
		}
		intents[r.Spec.Requester] = intent
	}
	out := make([]lifecyclev1alpha1.Requester, 0, len(intents))
	for name, intent := range intents {
		out = append(out, lifecyclev1alpha1.Requester{Name: name, Intent: intent})
	}
	// Wanting ones first, then by name; the limit cuts withdrawn ones.
	slices.SortFunc(out, func(a, b lifecyclev1alpha1.Requester) int {
		if (a.Intent == lifecyclev1alpha1.RequesterIntentEviction) != (b.Intent == lifecyclev1alpha1.RequesterIntentEviction) {
			if a.Intent == lifecyclev1alpha1.RequesterIntentEviction {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > maxRequesters {
		out = out[:maxRequesters]
	}
	return out
}

func wanted(requesters []lifecyclev1alpha1.Requester) bool {
	return slices.ContainsFunc(requesters, func(r lifecyclev1alpha1.Requester) bool {
		return r.Intent == lifecyclev1alpha1.RequesterIntentEviction
	})
}

func final(s lifecyclev1alpha1.EvictionStatus) bool {
	return meta.IsStatusConditionTrue(s.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted)) ||
		meta.IsStatusConditionTrue(s.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed))
}

// Final says whether the Eviction ended: TargetEvicted or Failed is True,
// and can never be reverted.
func Final(ev *lifecyclev1alpha1.Eviction) bool { return final(ev.Status) }

func activeIndex(s lifecyclev1alpha1.EvictionStatus) int {
	return slices.IndexFunc(s.TargetResponders, func(r lifecyclev1alpha1.TargetResponder) bool {
		return r.State == lifecyclev1alpha1.ResponderStateActive
	})
}

// activate gives responder i its turn, starting now (a startTime already
// stored cannot change).
func activate(s *lifecyclev1alpha1.EvictionStatus, i int, now metav1.Time) {
	s.TargetResponders[i].State = lifecyclev1alpha1.ResponderStateActive
	if r := ResponderStatus(s, s.TargetResponders[i].Name); r.StartTime == nil {
		r.StartTime = ptr.To(now)
	}
}

// endActive ends the Active responder's turn, if any, as Completed when it
// reported its completion, else as state; the same write must make the
// Eviction final.
func endActive(s *lifecyclev1alpha1.EvictionStatus, now metav1.Time, state lifecyclev1alpha1.ResponderStateType) {
	i := activeIndex(*s)
	if i < 0 {
		return
	}
	if ResponderStatus(s, s.TargetResponders[i].Name).CompletionTime != nil {
		state = lifecyclev1alpha1.ResponderStateCompleted
	}
	s.TargetResponders[i].State = state
}

// ResponderStatus is the entry of status.responders named name. The API
// server keeps one per target responder; one missing (which it would refuse)
// is added rather than trusted away.
func ResponderStatus(s *lifecyclev1alpha1.EvictionStatus, name string) *lifecyclev1alpha1.ResponderStatus {
	for i := range s.Responders {
		if s.Responders[i].Name == name {
			return &s.Responders[i]
		}
	}
	s.Responders = append(s.Responders, lifecyclev1alpha1.ResponderStatus{Name: name})
	return &s.Responders[len(s.Responders)-1]
}

// lastHeard is when the responder last said it was working.
func lastHeard(r *lifecyclev1alpha1.ResponderStatus) time.Time {
	if r.HeartbeatTime != nil {
		return r.HeartbeatTime.Time
	}
	return ptr.Deref(r.StartTime, metav1.Time{}).Time
}

func setCondition(s *lifecyclev1alpha1.EvictionStatus, t lifecyclev1alpha1.EvictionConditionType, reason lifecyclev1alpha1.EvictionConditionReason, message string, now metav1.Time) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: string(t), Status: metav1.ConditionTrue, Reason: string(reason), Message: message,
		ObservedGeneration: ptr.Deref(s.ObservedGeneration, 0), LastTransitionTime: now,
	})
}

// RequestStatus is an EvictionRequest's next status: the generation seen,
// and the outcome of its target's Eviction once that is final (TargetEvicted
// or Failed, as the Eviction says). An outcome recorded for an earlier
// Eviction of the target is dropped while a new one is under way.
func RequestStatus(req *lifecyclev1alpha1.EvictionRequest, ev *lifecyclev1alpha1.Eviction) lifecyclev1alpha1.EvictionRequestStatus {
	status := *req.Status.DeepCopy()
	status.ObservedGeneration = observed(status.ObservedGeneration, req.Generation)
	if ev == nil {
		return status
	}
	for _, t := range []lifecyclev1alpha1.EvictionConditionType{lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionFailed} {
		c := meta.FindStatusCondition(ev.Status.Conditions, string(t))
		if c == nil || c.Status != metav1.ConditionTrue {
			meta.RemoveStatusCondition(&status.Conditions, string(t))
			continue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			ObservedGeneration: req.Generation, LastTransitionTime: c.LastTransitionTime,
		})
	}
	return status
}
