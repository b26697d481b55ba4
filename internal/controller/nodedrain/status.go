package nodedrain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// facts are what one pass found, for the drain's status. Each stage records
// what it saw or did here; setStatus derives every condition of the
// NodeDrain and its phase from them when the pass ends, in the deferred
// write (Reconcile). A fact the pass did not reach is its zero value: the
// condition it feeds stays as the last pass wrote it.
//
// The Admitted condition and the queue fields (requestTime, startTime,
// queuePosition) are the admission controller's alone. At a run's
// boundary (runAgain, the undo's idle) this controller counts a new run
// (runNumber); admission then takes the drain afresh (AdmittedRun).
type facts struct {
	// again is why a drain that had ended runs again (runAgain).
	again *ending
	// node is the drain's node, when the pass read it; noExecute whether
	// the pass looked at its trigger taint (warnNoExecute).
	node      *corev1.Node
	noExecute bool
	// missing: the drain's node does not exist. held: its node is missing
	// or replaced, or its policy missing or unclear; the drain waits
	// (hold). replaced: the node was replaced and what was recorded of the
	// old one is dropped (nodeReplaced).
	missing, held, replaced bool
	// waiting: admission has not admitted the drain (admitted).
	waiting bool
	// cordoned: the cordon stage saw the node cordoned, by vacate or
	// someone else.
	cordoned bool
	// evacuations: what the evacuate stage found of the evacuations and
	// hooks; nil if it did not run.
	evacuations *evacuationCounts
	// evicting: what the evict stage found of the pods; nil if it did not
	// report. podsLeft: the evict stage ran and pods must still leave;
	// podsHeld: some of them wait for their evacuation or HTTP hook.
	evicting           *podCounts
	podsLeft, podsHeld bool
	// overdue: the drain ran out of time and onTimeout ForceDelete is
	// deleting what is left. failed: the drain ended Failed. drained: it
	// ended Drained. afterEviction: the pods left and evacuations after
	// eviction are not Completed.
	overdue, failed *ending
	drained         *drainedCounts
	afterEviction   bool
	// undoing: the drain is being undone; cancelling says what the undo
	// waits for, if anything; restored, once it is done, what it says.
	undoing    bool
	cancelling string
	restored   string
}

// ending is a reason and its message.
type ending struct{ reason, message string }

// evacuationCounts are the evacuate stage's findings.
type evacuationCounts struct {
	// reported is how many evacuations and HTTP hooks status.hooks lists;
	// before, how many of them come before eviction, completed how many
	// of those are Completed.
	reported, before, completed int
	// pending describes the evacuations not Completed.
	pending []string
}

// podCounts are the evict stage's findings: whether every pod that must
// leave has, how many are left, the plan's summary, and the pods that hold
// the drain up (setPodCounts writes the counts and lists the blockers).
type podCounts struct {
	completed bool
	remaining int32
	summary   string
	blockers  []podBlocker
	// pastDeadline is the requesters' deadline, when it passed and the
	// drain goes on (onTimeout Fail never stops at a deadline).
	pastDeadline *v1alpha1.DrainDeadline
}

// drainedCounts say how the drain ended Drained.
type drainedCounts struct {
	evicted int32
	took    time.Duration
}

// setStatus derives the drain's conditions and phase from what the pass
// found. It is the only writer of both in this controller.
func (s *scope) setStatus() {
	s.setPodCounts()
	s.setNoExecuteCondition()
	s.setCordonedCondition()
	s.setEvacuatedCondition()
	s.setPodsEvictedCondition()
	s.setBlockedCondition()
	s.setDrainedCondition()
	s.drain.Status.Phase = s.phase()
}

// phase is the drain's phase after the pass: how far it got.
func (s *scope) phase() v1alpha1.DrainPhase {
	f, was := &s.found, s.drain.Status.Phase
	if f.again != nil {
		was = v1alpha1.PhasePending
	}
	switch {
	case f.restored != "":
		return v1alpha1.PhasePending // idle until a requester returns
	case f.undoing:
		return v1alpha1.PhaseRestoring
	case f.failed != nil:
		return v1alpha1.PhaseFailed
	case f.drained != nil:
		return v1alpha1.PhaseDrained
	case f.afterEviction:
		return v1alpha1.PhaseEvacuating
	case f.podsLeft && f.podsHeld:
		return v1alpha1.PhaseEvacuating
	case f.podsLeft:
		return v1alpha1.PhaseEvicting
	case f.evacuations != nil && f.evacuations.before > f.evacuations.completed:
		return v1alpha1.PhaseEvacuating
	case f.cordoned && (was == "" || was == v1alpha1.PhasePending):
		return v1alpha1.PhaseCordoned
	case f.held, f.waiting && was == "":
		return v1alpha1.PhasePending
	}
	return was
}

// set sets a condition of the drain, its message capped at
// v1alpha1.MaxMessage runes.
func (s *scope) set(t string, status metav1.ConditionStatus, reason, msg string) {
	condition.Set(&s.drain.Status.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.drain.Generation,
		LastTransitionTime: metav1.NewTime(s.now),
	})
}

// remove removes conditions of the drain.
func (s *scope) remove(types ...string) {
	for _, t := range types {
		meta.RemoveStatusCondition(&s.drain.Status.Conditions, t)
	}
}

// setNoExecuteCondition: True while the node carries the trigger taint
// with effect NoExecute, False once it no longer does; a drain that never
// saw such a taint has no such condition.
func (s *scope) setNoExecuteCondition() {
	f := &s.found
	switch {
	case f.restored != "":
		s.remove(v1alpha1.ConditionNoExecuteTaint)
	case !f.noExecute:
	case hasNoExecuteTrigger(f.node):
		s.set(v1alpha1.ConditionNoExecuteTaint, metav1.ConditionTrue, v1alpha1.ReasonNoExecuteTaint, noExecuteMessage(f.node.Name))
	case meta.FindStatusCondition(s.drain.Status.Conditions, v1alpha1.ConditionNoExecuteTaint) != nil:
		s.set(v1alpha1.ConditionNoExecuteTaint, metav1.ConditionFalse, v1alpha1.ReasonNoExecuteTaintGone,
			fmt.Sprintf("node %s no longer has the taint %s with effect NoExecute", f.node.Name, v1alpha1.TaintDrain))
	}
}

// setCordonedCondition says whether the node is cordoned, and by whom. A
// drain that waits reports the cordon admission made (admission cordons
// a batch before any of it starts, and gives the node back while its
// drain waits for a maintenance window).
func (s *scope) setCordonedCondition() {
	f, nd := &s.found, s.drain
	switch {
	case f.restored != "":
		s.set(v1alpha1.ConditionCordoned, metav1.ConditionFalse, v1alpha1.ReasonRestored, f.restored)
	case f.missing:
		reason, msg := nd.NodeHold(nil)
		s.set(v1alpha1.ConditionCordoned, metav1.ConditionFalse, reason, msg)
	case f.replaced:
		s.remove(v1alpha1.ConditionCordoned)
	case f.waiting:
		if c := nd.AdmissionHold(); c != nil && (c.Reason == schedule.OutsideWindow || c.Reason == schedule.InvalidSchedule) {
			s.remove(v1alpha1.ConditionCordoned)
		} else if reason, msg, cordoned := nd.CordonState(s.node); cordoned {
			s.set(v1alpha1.ConditionCordoned, metav1.ConditionTrue, reason, msg)
		}
	case f.cordoned:
		reason, msg, _ := nd.CordonState(s.node)
		s.set(v1alpha1.ConditionCordoned, metav1.ConditionTrue, reason, msg)
	}
}

// setEvacuatedCondition says whether the evacuations and HTTP hooks are
// Completed, or, during an undo, what the cancel waits for.
func (s *scope) setEvacuatedCondition() {
	f := &s.found
	e := f.evacuations
	switch {
	case f.cancelling != "":
		s.set(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonCancelling, f.cancelling)
	case f.replaced:
		s.remove(v1alpha1.ConditionEvacuated)
	case e == nil:
	case e.reported == 0:
		s.set(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, v1alpha1.ReasonNoEvacuations, "no evacuation protects pods on this node")
	case e.before > e.completed:
		s.set(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonEvacuating,
			fmt.Sprintf("%d of %d evacuation(s) before eviction Completed; the pods they protect wait", e.completed, e.before))
	case len(e.pending) > 0:
		s.set(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonWaitingAfterEvict,
			"waiting for the evacuations after eviction: "+strings.Join(e.pending, "; "))
	default:
		s.set(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, v1alpha1.ReasonEvacuated,
			fmt.Sprintf("%d evacuation(s) Completed", e.reported))
	}
}

// setPodCounts writes how many pods left and are left, and lists the pods
// that hold the drain up (all of them counted, the first MaxBlockers
// listed, by pod, their holders and details cut to what the CRD allows),
// each with the time it was first seen so. A new refusal by the API server
// is also an event on the pod, as a new hold is (reportPods).
func (s *scope) setPodCounts() {
	e := s.found.evicting
	if e == nil {
		return
	}
	st := &s.drain.Status
	// Pods that arrive during the drain add to the total; evicted never
	// goes down.
	st.Total = max(st.Total, e.remaining+st.Evicted)
	st.Remaining = e.remaining
	st.Evicted = st.Total - e.remaining
	st.Progress = fmt.Sprintf("%d/%d", st.Evicted, st.Total)

	previous := map[string]metav1.Time{}
	for _, b := range st.Blockers {
		previous[b.Pod+"|"+b.Reason] = b.Since
	}
	blockers := make([]v1alpha1.Blocker, 0, len(e.blockers))
	for _, pb := range e.blockers {
		b := pb.Blocker
		b.Holder, b.Detail = truncate(b.Holder, maxHolder), truncate(b.Detail, maxDetail)
		if since, ok := previous[b.Pod+"|"+b.Reason]; ok {
			b.Since = since
		}
		blockers = append(blockers, b)
	}
	sort.Slice(blockers, func(i, j int) bool { return blockers[i].Pod < blockers[j].Pod })
	st.Blocked = int32(len(blockers))
	if len(blockers) > v1alpha1.MaxBlockers {
		blockers = blockers[:v1alpha1.MaxBlockers]
	}
	st.Blockers, st.BlockersOmitted = blockers, st.Blocked-int32(len(blockers))
}

// setPodsEvictedCondition says whether every pod that must leave has.
func (s *scope) setPodsEvictedCondition() {
	f := &s.found
	switch {
	case f.replaced:
		s.remove(v1alpha1.ConditionPodsEvicted)
	case f.evicting == nil:
	case f.evicting.completed:
		s.set(v1alpha1.ConditionPodsEvicted, metav1.ConditionTrue, v1alpha1.ReasonAllEvicted, f.evicting.summary)
	default:
		s.set(v1alpha1.ConditionPodsEvicted, metav1.ConditionFalse, v1alpha1.ReasonEvicting, f.evicting.summary)
	}
}

// setBlockedCondition says what keeps the drain from going on: pods
// blocked, or the timeout that ended it.
func (s *scope) setBlockedCondition() {
	f := &s.found
	switch {
	case f.failed != nil:
		s.set(v1alpha1.ConditionBlocked, metav1.ConditionTrue, f.failed.reason, f.failed.message)
	case f.overdue != nil:
		s.set(v1alpha1.ConditionBlocked, metav1.ConditionTrue, f.overdue.reason, f.overdue.message)
	case f.evicting != nil && len(f.evicting.blockers) > 0:
		st := &s.drain.Status
		msg := blockedMessage(st.Blocked, st.Blockers)
		if d := f.evicting.pastDeadline; d != nil {
			msg = fmt.Sprintf("past the deadline of requester %s (%s): draining on as fast as the pods allow (onTimeout Fail never stops a drain at a deadline); %s",
				d.Requester, d.Time.UTC().Format(time.RFC3339), msg)
		}
		s.set(v1alpha1.ConditionBlocked, metav1.ConditionTrue, v1alpha1.ReasonBlocked, msg)
	case f.evicting != nil:
		s.set(v1alpha1.ConditionBlocked, metav1.ConditionFalse, v1alpha1.ReasonNotBlocked, "nothing blocks the drain")
	case f.again != nil, f.held, f.restored != "":
		s.remove(v1alpha1.ConditionBlocked)
	}
}

// setDrainedCondition says whether the drain reached its end, and how.
func (s *scope) setDrainedCondition() {
	f := &s.found
	switch {
	case f.drained != nil:
		s.set(v1alpha1.ConditionDrained, metav1.ConditionTrue, v1alpha1.ReasonDrained,
			fmt.Sprintf("%d pod(s) left the node in %s", f.drained.evicted, f.drained.took.Round(time.Second)))
	case f.failed != nil:
		s.set(v1alpha1.ConditionDrained, metav1.ConditionFalse, f.failed.reason, f.failed.message)
	case f.again != nil:
		s.set(v1alpha1.ConditionDrained, metav1.ConditionFalse, f.again.reason, f.again.message)
	case f.replaced, f.restored != "":
		s.remove(v1alpha1.ConditionDrained)
	}
}

// blockedMessage is the Blocked condition's message: how many pods are
// blocked, the first three with their reasons.
func blockedMessage(total int32, blockers []v1alpha1.Blocker) string {
	parts := make([]string, 0, 3)
	for i, b := range blockers {
		if i == 3 {
			break
		}
		parts = append(parts, b.Pod+": "+b.Reason)
	}
	msg := fmt.Sprintf("%d pod(s) blocked: %s", total, strings.Join(parts, "; "))
	if int(total) > len(parts) {
		msg += fmt.Sprintf("; and %d more", int(total)-len(parts))
	}
	return msg
}
