package v1alpha1

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestNodeDrainState(t *testing.T) {
	admitted := []metav1.Condition{{Type: ConditionAdmitted, Status: metav1.ConditionTrue}}
	held := []metav1.Condition{{Type: ConditionAdmitted, Status: metav1.ConditionFalse}}
	deleting := metav1.Now()
	cases := []struct {
		name       string
		requesters int
		finalizer  bool
		deleting   bool
		phase      DrainPhase
		conditions []metav1.Condition

		requested, running, admitted, ended, evicting, drained bool
		why                                                    string
		// stale: the status was written for an older generation.
		stale bool
	}{
		{name: "new, no finalizer yet", requesters: 1, requested: true, why: "not admitted"},
		{name: "waiting", requesters: 1, finalizer: true, phase: PhasePending, conditions: held,
			requested: true, running: true, why: "not admitted"},
		{name: "evicting", requesters: 1, finalizer: true, phase: PhaseEvicting, conditions: admitted,
			requested: true, running: true, admitted: true, evicting: true},
		{name: "drained", requesters: 1, finalizer: true, phase: PhaseDrained, conditions: admitted,
			requested: true, admitted: true, ended: true, drained: true, why: "ended (Drained)"},
		{name: "drained, then asked again", requesters: 2, finalizer: true, phase: PhaseDrained, conditions: admitted, stale: true,
			requested: true, admitted: true, ended: true, why: "ended (Drained)"},
		{name: "failed", requesters: 2, finalizer: true, phase: PhaseFailed, conditions: admitted,
			requested: true, admitted: true, ended: true, why: "ended (Failed)"},
		{name: "no requester left", finalizer: true, phase: PhaseEvicting, conditions: admitted,
			admitted: true, why: "cancelled"},
		{name: "restoring", requesters: 1, finalizer: true, phase: PhaseRestoring, conditions: admitted,
			requested: true, admitted: true, why: "cancelled"},
		{name: "being deleted", requesters: 1, finalizer: true, deleting: true, phase: PhaseEvicting, conditions: admitted,
			admitted: true, why: "being deleted"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nd := &NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", Generation: 2}, Spec: NodeDrainSpec{NodeName: "n1"},
				Status: NodeDrainStatus{Phase: tc.phase, Conditions: tc.conditions, ObservedGeneration: 2}}
			if tc.stale {
				nd.Status.ObservedGeneration = 1
			}
			for range tc.requesters {
				nd.Spec.Requesters = append(nd.Spec.Requesters, Requester{Name: "cli:alice"})
			}
			if tc.finalizer {
				nd.Finalizers = []string{FinalizerRestore}
			}
			if tc.deleting {
				nd.DeletionTimestamp = &deleting
			}
			if got := nd.Requested(); got != tc.requested {
				t.Errorf("Requested() = %t, want %t", got, tc.requested)
			}
			if got := nd.Running(); got != tc.running {
				t.Errorf("Running() = %t, want %t", got, tc.running)
			}
			if got := nd.Admitted(); got != tc.admitted {
				t.Errorf("Admitted() = %t, want %t", got, tc.admitted)
			}
			if got := nd.Ended(); got != tc.ended {
				t.Errorf("Ended() = %t, want %t", got, tc.ended)
			}
			if got := nd.Drained(); got != tc.drained {
				t.Errorf("Drained() = %t, want %t", got, tc.drained)
			}
			evicting, why := nd.Evicting()
			if evicting != tc.evicting || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("Evicting() = %t, %q; want %t, saying %q", evicting, why, tc.evicting, tc.why)
			}
			if why != "" && !strings.Contains(why, "node n1") {
				t.Errorf("Evicting() says %q, which does not name the node", why)
			}
		})
	}
}

func TestAdmissionHold(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		want       string // the reason of the condition returned; "" for none
	}{
		{name: "not looked at yet"},
		{name: "admitted", conditions: []metav1.Condition{{Type: ConditionAdmitted, Status: metav1.ConditionTrue, Reason: ReasonAdmitted}}},
		{name: "queued", conditions: []metav1.Condition{{Type: ConditionAdmitted, Status: metav1.ConditionFalse, Reason: ReasonWaitingForBatch}}, want: ReasonWaitingForBatch},
		{name: "unknown", conditions: []metav1.Condition{{Type: ConditionAdmitted, Status: metav1.ConditionUnknown, Reason: ReasonPolicyNotFound}}, want: ReasonPolicyNotFound},
		{name: "another condition only", conditions: []metav1.Condition{{Type: ConditionCordoned, Status: metav1.ConditionFalse, Reason: ReasonNodeNotFound}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := &NodeDrain{Status: NodeDrainStatus{Conditions: tc.conditions}}
			got := ""
			if c := nd.AdmissionHold(); c != nil {
				got = c.Reason
			}
			if got != tc.want {
				t.Errorf("AdmissionHold() has reason %q, want %q", got, tc.want)
			}
			if held := nd.AdmissionHold() != nil; held && nd.Admitted() {
				t.Error("both admitted and held")
			}
		})
	}
}

func TestCordonRecord(t *testing.T) {
	nd := &NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}, Spec: NodeDrainSpec{NodeName: "n1"}}
	recorded := nd.DeepCopy()
	recorded.Status.NodeUID = "node-a"
	other := &NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "u2"}, Spec: NodeDrainSpec{NodeName: "n1"}}
	node := func(name string, uid types.UID, unschedulable bool, record ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}, Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
		if len(record) > 0 {
			n.Annotations = map[string]string{AnnotationCordonedBy: record[0]}
		}
		return n
	}
	cases := []struct {
		name   string
		drain  *NodeDrain
		node   *corev1.Node
		not    string // "" when the cordon is the drain's
		reason string // CordonState's reason; "" when not cordoned
	}{
		{name: "ours", drain: nd, node: node("n1", "node-a", true, "n1/u1"), reason: ReasonCordoned},
		{name: "ours, on the node it recorded", drain: recorded, node: node("n1", "node-a", true, "n1/u1"), reason: ReasonCordoned},
		{name: "ours but uncordoned since", drain: nd, node: node("n1", "node-a", false, "n1/u1")},
		{name: "someone else's cordon", drain: nd, node: node("n1", "node-a", true), not: "carries no", reason: ReasonAlreadyCordoned},
		{name: "not cordoned", drain: nd, node: node("n1", "node-a", false), not: "carries no"},
		{name: "no UID (by hand, or an old version)", drain: nd, node: node("n1", "node-a", true, "n1"), not: "no drain UID", reason: ReasonAlreadyCordoned},
		{name: "an earlier drain of the same name", drain: nd, node: node("n1", "node-a", true, "n1/u0"), not: "that drain's UID is u1", reason: ReasonAlreadyCordoned},
		{name: "another drain's", drain: other, node: node("n1", "node-a", true, "n1/u1"), not: "names drain n1, not n2", reason: ReasonAlreadyCordoned},
		{name: "the drain of another node", drain: nd, node: node("n9", "node-a", true, "n1/u1"), not: "the drain of node n1", reason: ReasonAlreadyCordoned},
		{name: "a node recreated under the name", drain: recorded, node: node("n1", "node-b", true, "n1/u1"), not: "earlier node of this name", reason: ReasonAlreadyCordoned},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			not := tc.drain.NotItsCordon(tc.node)
			if (tc.not == "") != (not == "") || !strings.Contains(not, tc.not) {
				t.Errorf("NotItsCordon() = %q, want %q", not, tc.not)
			}
			if got := tc.drain.Cordoned(tc.node); got != (not == "") {
				t.Errorf("Cordoned() = %t while NotItsCordon() says %q", got, not)
			}
			reason, msg, ok := tc.drain.CordonState(tc.node)
			if reason != tc.reason || ok != (tc.reason != "") || ok != (msg != "") {
				t.Errorf("CordonState() = %q, %q, %t; want reason %q", reason, msg, ok, tc.reason)
			}
		})
	}
}

func TestNodeHold(t *testing.T) {
	fresh := &NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: NodeDrainSpec{NodeName: "n1"}}
	recorded := fresh.DeepCopy()
	recorded.Status.NodeUID = "node-a"
	node := func(uid types.UID) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: uid}}
	}
	cases := []struct {
		name    string
		drain   *NodeDrain
		node    *corev1.Node
		reason  string
		message string
	}{
		{name: "no node", drain: fresh, reason: ReasonNodeNotFound, message: "node n1 does not exist; the drain starts if it appears"},
		{name: "no node, UID recorded", drain: recorded, reason: ReasonNodeNotFound, message: "node n1 does not exist; the drain starts if it appears"},
		{name: "no UID recorded yet", drain: fresh, node: node("node-a")},
		{name: "the node it recorded", drain: recorded, node: node("node-a")},
		{name: "a node recreated under the name", drain: recorded, node: node("node-b"), reason: ReasonNodeReplaced,
			message: "node n1 was deleted and created again (uid node-b, was node-a): it is another node; the drain starts over on it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := tc.drain.NodeHold(tc.node)
			if reason != tc.reason || msg != tc.message {
				t.Errorf("NodeHold() = %q, %q; want %q, %q", reason, msg, tc.reason, tc.message)
			}
		})
	}
}

func TestEvacuationState(t *testing.T) {
	created := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	beat := metav1.NewTime(created.Add(time.Minute))
	early := metav1.NewTime(created.Add(-time.Minute))
	cases := []struct {
		name      string
		gen       int64
		status    EvacuationStatus
		answered  bool
		phase     EvacuationPhase
		lastHeard time.Time
	}{
		{name: "not taken up", gen: 1, phase: EvacuationPending, lastHeard: created},
		{name: "an answer to an older generation", gen: 2, status: EvacuationStatus{Phase: EvacuationCompleted, ObservedGeneration: 1, HeartbeatTime: &beat},
			phase: EvacuationPending, lastHeard: beat.Time},
		{name: "in progress", gen: 2, status: EvacuationStatus{Phase: EvacuationInProgress, ObservedGeneration: 2, HeartbeatTime: &beat},
			answered: true, phase: EvacuationInProgress, lastHeard: beat.Time},
		{name: "completed", gen: 1, status: EvacuationStatus{Phase: EvacuationCompleted, ObservedGeneration: 1},
			answered: true, phase: EvacuationCompleted, lastHeard: created},
		{name: "a heartbeat older than the request", gen: 1, status: EvacuationStatus{Phase: EvacuationFailed, ObservedGeneration: 1, HeartbeatTime: &early},
			answered: true, phase: EvacuationFailed, lastHeard: created},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := &Evacuation{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen, CreationTimestamp: metav1.NewTime(created)}, Status: tc.status}
			if got := ev.Answered(); got != tc.answered {
				t.Errorf("Answered() = %t, want %t", got, tc.answered)
			}
			if got := ev.CurrentPhase(); got != tc.phase {
				t.Errorf("CurrentPhase() = %s, want %s", got, tc.phase)
			}
			if got := ev.LastHeard(); !got.Equal(tc.lastHeard) {
				t.Errorf("LastHeard() = %v, want %v", got, tc.lastHeard)
			}
		})
	}
}
