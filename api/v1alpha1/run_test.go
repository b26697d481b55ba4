package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRequestChange(t *testing.T) {
	at := func(min int) *metav1.Time {
		return &metav1.Time{Time: time.Date(2026, 11, 26, 12, min, 0, 0, time.UTC)}
	}
	ran := &DrainRun{Requesters: []RunRequester{{Name: "cli:alice"}, {Name: "agent:aws-spot", Deadline: at(5)}}}
	cases := []struct {
		name       string
		spec       NodeDrainSpec
		mode       DrainMode
		run        *DrainRun
		wantReason string
		wantIn     string
	}{
		{name: "same requesters", run: ran, mode: ModeMaintenance,
			spec: NodeDrainSpec{Requesters: []Requester{{Name: "cli:alice", Reason: "new reason"}, {Name: "agent:aws-spot", Deadline: at(5)}}}},
		{name: "a requester left", run: ran, mode: ModeMaintenance,
			spec: NodeDrainSpec{Requesters: []Requester{{Name: "agent:aws-spot", Deadline: at(5)}}}},
		{name: "a requester joined", run: ran, mode: ModeMaintenance, wantReason: ReasonRequesterAdded, wantIn: "agent:shutdown joined",
			spec: NodeDrainSpec{Requesters: []Requester{{Name: "cli:alice"}, {Name: "agent:aws-spot", Deadline: at(5)}, {Name: "agent:shutdown"}}}},
		{name: "a deadline moved", run: ran, mode: ModeMaintenance, wantReason: ReasonDeadlineChanged,
			wantIn: "agent:aws-spot (2026-11-26T12:09:00Z, was 2026-11-26T12:05:00Z)",
			spec:   NodeDrainSpec{Requesters: []Requester{{Name: "cli:alice"}, {Name: "agent:aws-spot", Deadline: at(9)}}}},
		{name: "a deadline set", run: ran, mode: ModeMaintenance, wantReason: ReasonDeadlineChanged, wantIn: "cli:alice (2026-11-26T12:01:00Z, was none)",
			spec: NodeDrainSpec{Requesters: []Requester{{Name: "cli:alice", Deadline: at(1)}, {Name: "agent:aws-spot", Deadline: at(5)}}}},
		{name: "a deadline dropped", run: ran, mode: ModeMaintenance, wantReason: ReasonDeadlineChanged, wantIn: "(none, was 2026-11-26T12:05:00Z)",
			spec: NodeDrainSpec{Requesters: []Requester{{Name: "cli:alice"}, {Name: "agent:aws-spot"}}}},
		{name: "mode raised", run: ran, mode: ModeMaintenance, wantReason: ReasonModeRaised, wantIn: "from Maintenance to Decommission",
			spec: NodeDrainSpec{Mode: ModeDecommission, Requesters: []Requester{{Name: "cli:alice"}, {Name: "agent:aws-spot", Deadline: at(5)}}}},
		{name: "mode raised wins over a new requester", run: ran, mode: ModeMaintenance, wantReason: ReasonModeRaised,
			spec: NodeDrainSpec{Mode: ModeDecommission, Requesters: []Requester{{Name: "delete"}, {Name: "cli:alice"}}}},
		{name: "ran in Decommission", run: ran, mode: ModeDecommission,
			spec: NodeDrainSpec{Mode: ModeDecommission, Requesters: []Requester{{Name: "cli:alice"}, {Name: "agent:aws-spot", Deadline: at(5)}}}},
		{name: "no record of the run", mode: ModeMaintenance,
			spec: NodeDrainSpec{Requesters: []Requester{{Name: "cli:bob"}}}},
		{name: "never ran, mode raised", spec: NodeDrainSpec{Mode: ModeDecommission}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nd := &NodeDrain{Spec: c.spec, Status: NodeDrainStatus{Mode: c.mode, Run: c.run}}
			reason, msg := nd.RequestChange()
			if reason != c.wantReason || !strings.Contains(msg, c.wantIn) {
				t.Errorf("RequestChange() = %q, %q; want %q with %q", reason, msg, c.wantReason, c.wantIn)
			}
		})
	}
}

func TestEvacuationNameIsUniquePerPair(t *testing.T) {
	a, b := EvacuationName("a.b", "c"), EvacuationName("a", "b.c")
	if a == b {
		t.Fatalf("node a.b with provider c and node a with provider b.c share the name %s", a)
	}
	if first, again := EvacuationName("n1", "volumes"), EvacuationName("n"+"1", "vol"+"umes"); first != again {
		t.Fatalf("the name is not stable: %s, then %s", first, again)
	}
	if got := EvacuationName("n1", "volumes"); !strings.HasPrefix(got, "n1.volumes-") {
		t.Errorf("name %s does not start with the node and provider", got)
	}
	long := EvacuationName(strings.Repeat("n", 250), strings.Repeat("p", 250))
	if len(long) > 253 || strings.Contains(long, ".-") {
		t.Errorf("long name %q (%d) is not a valid object name", long, len(long))
	}
	if long == EvacuationName(strings.Repeat("n", 250), strings.Repeat("p", 249)) {
		t.Error("two long pairs share a name")
	}
}
