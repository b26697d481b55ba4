package v1alpha1

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons a drain that had ended runs again (status.run.reason, and the
// Drained condition while the new run goes on).
const (
	// ReasonRequesterAdded: a requester joined a Failed drain.
	ReasonRequesterAdded = "RequesterAdded"
	// ReasonDeadlineChanged: a requester of a Failed drain set, changed or
	// dropped its deadline.
	ReasonDeadlineChanged = "DeadlineChanged"
	// ReasonModeRaised: the drain's mode went up (Maintenance to
	// Decommission) after it ended, as node deletion does.
	ReasonModeRaised = "ModeRaised"
	// ReasonPodsArrived: pods that must leave turned up on a Drained node
	// (they tolerate the cordon, or were bound to it by name).
	ReasonPodsArrived = "PodsArrived"
)

// EventRunningAgain: a drain that had ended runs again (the reasons above).
const EventRunningAgain = "RunningAgain"

// Mode is the drain's mode: spec.mode, Maintenance when unset.
func (nd *NodeDrain) Mode() DrainMode {
	if nd.Spec.Mode == "" {
		return ModeMaintenance
	}
	return nd.Spec.Mode
}

// Ended reports whether the drain reached an end: Drained or Failed.
func (nd *NodeDrain) Ended() bool {
	return nd.Status.Phase == PhaseDrained || nd.Status.Phase == PhaseFailed
}

// RunRequestersOf are requesters as a run records them: name and deadline.
func RunRequestersOf(rs []Requester) []RunRequester {
	out := make([]RunRequester, 0, len(rs))
	for _, r := range rs {
		out = append(out, RunRequester{Name: r.Name, Deadline: r.Deadline})
	}
	return out
}

// RequestChange says what the drain is asked that its current run
// (status.run, status.mode) did not answer: its mode went up (ModeRaised),
// a requester joined (RequesterAdded), or a requester's deadline is not the
// one the run had (DeadlineChanged); "" when nothing. A requester that left
// is no change: the others still want what the run did. A drain with no
// record of its run (it never ran) has no
// change to report.
func (nd *NodeDrain) RequestChange() (reason, message string) {
	if nd.Status.Mode != "" && nd.Status.Mode != ModeDecommission && nd.Mode() == ModeDecommission {
		return ReasonModeRaised, fmt.Sprintf("its mode went up from %s to %s", nd.Status.Mode, nd.Mode())
	}
	if nd.Status.Run == nil {
		return "", ""
	}
	var joined, moved []string
	for _, r := range nd.Spec.Requesters {
		i := slices.IndexFunc(nd.Status.Run.Requesters, func(rr RunRequester) bool { return rr.Name == r.Name })
		switch {
		case i < 0:
			joined = append(joined, r.Name)
		case !timeOf(nd.Status.Run.Requesters[i].Deadline).Equal(timeOf(r.Deadline)):
			moved = append(moved, fmt.Sprintf("%s (%s, was %s)", r.Name, deadlineText(r.Deadline),
				deadlineText(nd.Status.Run.Requesters[i].Deadline)))
		}
	}
	switch {
	case len(joined) > 0:
		return ReasonRequesterAdded, "requester(s) " + strings.Join(joined, ", ") + " joined"
	case len(moved) > 0:
		return ReasonDeadlineChanged, "the deadline of " + strings.Join(moved, ", ") + " changed"
	}
	return "", ""
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func deadlineText(t *metav1.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}
