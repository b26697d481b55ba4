package v1alpha1

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The questions every part of vacate asks of a drain or an evacuation,
// answered once, here: the controllers, the CLI, explain and the metrics
// use these and keep no copy of their own.

// Requested reports whether someone still wants the drain: it has
// requesters and is not being deleted.
func (nd *NodeDrain) Requested() bool {
	return len(nd.Spec.Requesters) > 0 && nd.DeletionTimestamp.IsZero()
}

// Admitted reports whether admission let the drain's current run start:
// its Admitted condition is True, written for this run (AdmissionCurrent).
func (nd *NodeDrain) Admitted() bool {
	return nd.AdmissionCurrent() && meta.IsStatusConditionTrue(nd.Status.Conditions, ConditionAdmitted)
}

// AdmissionCurrent reports whether admission's fields (the Admitted
// condition, requestTime, startTime, queuePosition) were written for the
// drain's current run; otherwise they are the last run's, and admission
// has yet to look at this one.
func (nd *NodeDrain) AdmissionCurrent() bool {
	return nd.Status.AdmittedRun == nd.Status.RunNumber
}

// AdmissionHold returns the Admitted condition while admission holds the
// drain's current run (written, and not True: its reason says why), and
// nil once the run is admitted or before admission has looked at it.
func (nd *NodeDrain) AdmissionHold() *metav1.Condition {
	c := meta.FindStatusCondition(nd.Status.Conditions, ConditionAdmitted)
	if c == nil || c.Status == metav1.ConditionTrue || !nd.AdmissionCurrent() {
		return nil
	}
	return c
}

// Running reports whether the drain is under way or waiting to be: requested,
// not ended, not being undone, and carrying the finalizer its undo needs (the
// NodeDrain controller adds it first; until then nothing is done to its node,
// since a drain deleted without it would leave the cordon behind).
func (nd *NodeDrain) Running() bool {
	return nd.Requested() && slices.Contains(nd.Finalizers, FinalizerRestore) &&
		!nd.Ended() && nd.Status.Phase != PhaseRestoring
}

// Drained reports whether the drain finished what its current spec asks:
// phase Drained, written for the generation the reader sees (a requester
// or a mode that joined since is not answered by an older Drained).
func (nd *NodeDrain) Drained() bool {
	return nd.Status.Phase == PhaseDrained && nd.Status.ObservedGeneration == nd.Generation
}

// Evicting says whether the drain may evict its node's pods now: Running and
// admitted. When it may not, why says so, in words for a person.
func (nd *NodeDrain) Evicting() (ok bool, why string) {
	node := nd.Spec.NodeName
	switch {
	case !nd.DeletionTimestamp.IsZero():
		return false, fmt.Sprintf("the drain of node %s is being deleted", node)
	case nd.Status.Phase == PhaseRestoring || len(nd.Spec.Requesters) == 0:
		return false, fmt.Sprintf("the drain of node %s is cancelled", node)
	case nd.Ended():
		return false, fmt.Sprintf("the drain of node %s ended (%s)", node, nd.Status.Phase)
	case !nd.Admitted():
		return false, fmt.Sprintf("the drain of node %s is not admitted (held or waiting)", node)
	}
	return true, ""
}

// NotItsCordon says why the node's AnnotationCordonedBy does not prove that
// this drain cordoned it, or "" when it does: the record is exactly the
// drain's CordonedByValue, on the drain's node, and the drain recorded no
// other node UID (a node recreated under the same name is not the one it
// cordoned). Only a drain's own cordon is ever given back.
func (nd *NodeDrain) NotItsCordon(node *corev1.Node) string {
	_, marked := node.Annotations[AnnotationCordonedBy]
	name, uid, hasUID := CordonedBy(node)
	switch {
	case !marked:
		return "carries no " + AnnotationCordonedBy
	case !hasUID:
		return "names no drain UID (written before vacate recorded one, or by hand)"
	case name != nd.Name:
		return fmt.Sprintf("names drain %s, not %s", name, nd.Name)
	case uid != nd.UID:
		return fmt.Sprintf("names drain %s with UID %s, but that drain's UID is %s", name, uid, nd.UID)
	case nd.Spec.NodeName != node.Name:
		return fmt.Sprintf("names the drain of node %s", nd.Spec.NodeName)
	case nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID):
		return fmt.Sprintf("names drain %s, which worked on an earlier node of this name (UID %s)", name, nd.Status.NodeUID)
	}
	return ""
}

// Cordoned reports whether the node carries this drain's own cordon record
// (NotItsCordon says nothing against it).
func (nd *NodeDrain) Cordoned(node *corev1.Node) bool { return nd.NotItsCordon(node) == "" }

// MessageCordoned is the Cordoned condition's message when vacate cordoned
// the node for the drain.
const MessageCordoned = "vacate cordoned the node"

// CordonState is the drain's Cordoned condition for the node as it is:
// cordoned by this drain (ReasonCordoned), cordoned by someone else
// (ReasonAlreadyCordoned: vacate never uncordons it), or not cordoned (ok
// false). Only the NodeDrain controller writes the condition.
func (nd *NodeDrain) CordonState(node *corev1.Node) (reason, message string, ok bool) {
	switch {
	case !node.Spec.Unschedulable:
		return "", "", false
	case nd.Cordoned(node):
		return ReasonCordoned, MessageCordoned, true
	}
	return ReasonAlreadyCordoned, "the node was already cordoned by someone else; vacate will not uncordon it", true
}

// NodeHold says why the drain may neither go on nor start on node, or ""
// when its node allows it: no node of its name exists (node is nil,
// ReasonNodeNotFound), or the node is not the one the drain recorded in
// status.nodeUID but another created under the same name
// (ReasonNodeReplaced). The admission controller holds such a drain with
// this reason and message (Admitted=False); the NodeDrain controller says
// the same where it reports it (its Cordoned condition, its NodeReplaced
// event).
func (nd *NodeDrain) NodeHold(node *corev1.Node) (reason, message string) {
	switch {
	case node == nil:
		return ReasonNodeNotFound, fmt.Sprintf("node %s does not exist; the drain starts if it appears", nd.Spec.NodeName)
	case nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID):
		return ReasonNodeReplaced, fmt.Sprintf("node %s was deleted and created again (uid %s, was %s): it is another node; the drain starts over on it",
			node.Name, node.UID, nd.Status.NodeUID)
	}
	return "", ""
}

// Answered reports whether the provider has answered the current request:
// it set a phase for the Evacuation's current generation.
func (ev *Evacuation) Answered() bool {
	return ev.Status.Phase != "" && ev.Status.ObservedGeneration == ev.Generation
}

// CurrentPhase is the provider's answer to the current request, Pending
// until it has answered it (its phase is for an older generation, or it has
// none).
func (ev *Evacuation) CurrentPhase() EvacuationPhase {
	if !ev.Answered() {
		return EvacuationPending
	}
	return ev.Status.Phase
}

// ForEviction reports whether the Evacuation was asked for one pod's
// Eviction (LabelEviction names it, and no drain has taken it over): it is
// not a drain's, and a drain's readers leave it to the coordinator.
func (ev *Evacuation) ForEviction() bool {
	uid := ev.Labels[LabelEviction]
	return uid != "" && uid == ev.Spec.DrainUID
}

// LastHeard is when the provider last reported on the Evacuation (its
// heartbeat), or when the Evacuation was created if it has not since.
func (ev *Evacuation) LastHeard() time.Time {
	if hb := ev.Status.HeartbeatTime; hb != nil && hb.After(ev.CreationTimestamp.Time) {
		return hb.Time
	}
	return ev.CreationTimestamp.Time
}

// ServingGated reports whether the pod has the readiness gate
// ConditionServing: it is evicted endpoint-aware, out of its Services
// first.
func ServingGated(p *corev1.Pod) bool {
	for _, g := range p.Spec.ReadinessGates {
		if g.ConditionType == ConditionServing {
			return true
		}
	}
	return false
}

// OutOfService reports whether a drain took the pod out of service (its
// condition ConditionServing False, reason ReasonServingDraining), and
// since when.
func OutOfService(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == ConditionServing && c.Status == corev1.ConditionFalse && c.Reason == ReasonServingDraining {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}
