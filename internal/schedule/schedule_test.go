package schedule

import (
	"fmt"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func drainAt(node, zone string, minute int, pdbs map[string]int) Drain {
	return Drain{Node: node, Topology: map[string]string{"zone": zone}, Requested: t0.Add(time.Duration(minute) * time.Minute), PDBs: pdbs}
}

func admitted(vs []Verdict) []string {
	var out []string
	for _, v := range vs {
		if v.Admit {
			out = append(out, v.Node)
		}
	}
	return out
}

func waitingFor(vs []Verdict) map[string]string {
	out := map[string]string{}
	for _, v := range vs {
		if !v.Admit {
			out[v.Node] = v.Reason
		}
	}
	return out
}

func TestAdmitSlotsZonesAndOrder(t *testing.T) {
	// 12 nodes in 3 zones requested at once, 3 at a time, one zone at a time.
	var drains []Drain
	for i := range 12 {
		drains = append(drains, drainAt(fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", i%3), 0, nil))
	}
	l := Limits{MaxParallel: 3, Topology: []TopologyLimit{{Key: "zone", MaxUnavailable: 1}}}
	vs := Admit(drains, nil, l)
	// Zone z0 holds n00, n03, n06, n09: the first three by name start.
	if got := strings.Join(admitted(vs), " "); got != "n00 n03 n06" {
		t.Fatalf("admitted %q, want n00 n03 n06", got)
	}
	w := waitingFor(vs)
	if w["n09"] != WaitingForSlot || w["n01"] != WaitingForSlot {
		t.Errorf("queue reasons %v: with the slots full every drain waits for a slot", w)
	}
	// With slots to spare, the other zones wait for the zone limit.
	l.MaxParallel = 6
	vs = Admit(drains, nil, l)
	if got := strings.Join(admitted(vs), " "); got != "n00 n03 n06 n09" {
		t.Fatalf("admitted %q, want all of zone z0", got)
	}
	if w := waitingFor(vs); w["n01"] != WaitingForZone ||
		!strings.Contains(vs[4].Message, "queued at position 1: zone z1 would make 2 zone domains with draining nodes; at most 1 at once (draining now: z0)") {
		t.Errorf("queue %v; first message %q", w, vs[4].Message)
	}

	// Admitted drains count: two running in z1 leave one slot, in z1 only.
	drains[1].Admitted, drains[4].Admitted = true, true
	l.MaxParallel = 3
	vs = Admit(drains, nil, l)
	if got := strings.Join(admitted(vs), " "); got != "n07" {
		t.Errorf("admitted %q next to two running drains in z1, want n07 (first by name in z1)", got)
	}

	// First requested, first admitted.
	late := []Drain{drainAt("a", "z0", 5, nil), drainAt("b", "z0", 1, nil)}
	if got := admitted(Admit(late, nil, Limits{MaxParallel: 1})); len(got) != 1 || got[0] != "b" {
		t.Errorf("admitted %v, want the earlier request b", got)
	}
}

// TestAdmitPDBAwareAvoidsDeadlock: two Deployments whose PDBs allow one
// disruption each, spread over the requested nodes. Naive first-come order
// would start nodes whose PDBs have no room left; PDB-aware admission starts
// a node with room, and those without wait while it runs.
func TestAdmitPDBAwareAvoidsDeadlock(t *testing.T) {
	pdbs := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 1, 1), testutil.PDB("shop", "b", "b", 1, 1)}
	drains := []Drain{
		drainAt("n1", "z0", 0, map[string]int{"shop/a": 1, "shop/b": 1}), // takes both PDBs' room
		drainAt("n2", "z0", 1, map[string]int{"shop/a": 1}),
		drainAt("n3", "z0", 2, map[string]int{"shop/b": 1}),
		drainAt("n4", "z0", 3, nil), // nothing guarded: always has room
	}
	vs := Admit(drains, pdbs, Limits{MaxParallel: 3})
	if got := strings.Join(admitted(vs), " "); got != "n1 n4" {
		t.Fatalf("admitted %q, want n1 (room in both PDBs) and n4 (unguarded)", got)
	}
	w := waitingFor(vs)
	if w["n2"] != WaitingForPDBHeadroom || w["n3"] != WaitingForPDBHeadroom {
		t.Errorf("queue %v: n2 and n3 must wait for PDB room while n1 runs", w)
	}
	for _, v := range vs {
		if v.Node == "n2" && !strings.Contains(v.Message, "none of its pods could go now: no room in PDB shop/a (allows 0, its pods here 1)") {
			t.Errorf("n2's message does not name the PDB without room: %q", v.Message)
		}
	}

	// A running drain still needs PDB a's one disruption: n2 waits for it,
	// though the PDB allows one now; n3 (PDB b) starts.
	running := []Drain{
		drainAt("n1", "z0", 0, map[string]int{"shop/a": 1}),
		drainAt("n2", "z0", 1, map[string]int{"shop/a": 1}),
		drainAt("n3", "z0", 2, map[string]int{"shop/b": 1}),
	}
	running[0].Admitted = true
	vs = Admit(running, pdbs, Limits{MaxParallel: 3})
	if got := strings.Join(admitted(vs), " "); got != "n3" {
		t.Errorf("admitted %q next to a running drain that needs PDB a, want n3", got)
	}
	if w := waitingFor(vs); w["n2"] != WaitingForPDBHeadroom {
		t.Errorf("queue %v: n2 must wait for the room the running drain needs", w)
	}

	// A PDB already at 0: its node starts only when nothing else runs.
	zero := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 0, 0)}
	stuck := []Drain{drainAt("s", "z0", 0, map[string]int{"shop/a": 1})}
	if got := admitted(Admit(stuck, zero, Limits{MaxParallel: 2})); len(got) != 1 {
		t.Errorf("alone, a drain without PDB room is admitted (something must move); got %v", got)
	}
	stuck = append(stuck, drainAt("free", "z0", 1, nil))
	if got := strings.Join(admitted(Admit(stuck, zero, Limits{MaxParallel: 2})), " "); got != "free" {
		t.Errorf("admitted %q, want only the drain with room", got)
	}
}

// TestAdmitPartialRoomFillsFreeSlots: at scale a node holds pods of dozens
// of PDBs, and one PDB short of room must not keep the whole node waiting
// beside a free slot while the rest of its pods could go. A drain with room
// in some of its PDBs (or pods no PDB guards) takes a slot left free by the
// drains with room in all of theirs; one none of whose pods could go still
// waits.
func TestAdmitPartialRoomFillsFreeSlots(t *testing.T) {
	pdbs := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 1, 1), testutil.PDB("shop", "b", "b", 1, 1)}
	drains := []Drain{
		drainAt("n1", "z0", 0, map[string]int{"shop/a": 1}),
		drainAt("n2", "z0", 1, map[string]int{"shop/a": 1, "shop/b": 1}), // a is short, b has room
		drainAt("n3", "z0", 2, map[string]int{"shop/a": 1}),              // only a: nothing could go
		drainAt("n4", "z0", 3, map[string]int{"shop/a": 1}),
	}
	drains[0].Admitted = true
	drains[3].Unguarded = 2 // a is short, but two pods no PDB guards can go
	vs := Admit(drains, pdbs, Limits{MaxParallel: 4})
	if got := strings.Join(admitted(vs), " "); got != "n2 n4" {
		t.Fatalf("admitted %q, want n2 (room in PDB b) and n4 (unguarded pods) in the free slots", got)
	}
	if w := waitingFor(vs); w["n3"] != WaitingForPDBHeadroom {
		t.Errorf("queue %v: n3, none of whose pods could go, must wait", w)
	}

	// Slots are scarce: a later drain with room in all its PDBs goes before
	// an earlier one with room in only some.
	scarce := []Drain{
		drainAt("n1", "z0", 0, map[string]int{"shop/a": 1}),
		drainAt("n2", "z0", 1, map[string]int{"shop/a": 1, "shop/b": 1}),
		drainAt("n5", "z0", 2, map[string]int{"shop/b": 1}),
	}
	scarce[0].Admitted = true
	vs = Admit(scarce, pdbs, Limits{MaxParallel: 2})
	if got := strings.Join(admitted(vs), " "); got != "n5" {
		t.Errorf("admitted %q with one slot free, want n5 (room in all its PDBs) before n2", got)
	}
	if w := waitingFor(vs); w["n2"] != WaitingForSlot {
		t.Errorf("queue %v: n2 must wait for a slot", w)
	}
}

func TestMaxParallel(t *testing.T) {
	for _, tc := range []struct {
		v        *intstr.IntOrString
		governed int
		want     int
	}{
		{nil, 50, 1},
		{ptr(intstr.FromInt32(3)), 50, 3},
		{ptr(intstr.FromString("10%")), 50, 5},
		{ptr(intstr.FromString("10%")), 5, 1}, // rounds down, at least 1
		{ptr(intstr.FromString("100%")), 7, 7},
	} {
		got, err := MaxParallel(tc.v, tc.governed)
		if err != nil || got != tc.want {
			t.Errorf("MaxParallel(%v, %d) = %d, %v; want %d", tc.v, tc.governed, got, err, tc.want)
		}
	}
	if _, err := MaxParallel(ptr(intstr.FromString("ten")), 5); err == nil {
		t.Error("a malformed percentage is accepted")
	}
}

func ptr[T any](v T) *T { return &v }

func TestAdmitDeadlinesFirst(t *testing.T) {
	// Three drains without a deadline requested first, then two whose
	// machines go away: the deadlines go first, earliest first.
	drains := []Drain{
		drainAt("a", "z0", 0, nil), drainAt("b", "z0", 1, nil), drainAt("c", "z0", 2, nil),
		drainAt("spot-late", "z0", 3, nil), drainAt("spot-soon", "z0", 4, nil),
	}
	drains[3].Deadline = t0.Add(10 * time.Minute)
	drains[4].Deadline = t0.Add(6 * time.Minute)
	vs := Admit(drains, nil, Limits{MaxParallel: 1})
	if got := strings.Join(admitted(vs), " "); got != "spot-soon" {
		t.Fatalf("admitted %q, want spot-soon (earliest deadline)", got)
	}
	var queue []string
	for _, v := range vs[1:] {
		queue = append(queue, fmt.Sprintf("%d:%s", v.Position, v.Node))
	}
	if got := strings.Join(queue, " "); got != "1:spot-late 2:a 3:b 4:c" {
		t.Errorf("queue %q, want the other deadline first, then by request", got)
	}

	// A deadline takes a free slot even when none of its pods could go now
	// (the machine goes away whatever the budgets say), but never more
	// slots than the policy allows.
	zero := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 0, 0)}
	blocked := []Drain{drainAt("running", "z0", 0, nil), drainAt("patient", "z0", 1, map[string]int{"shop/a": 1}),
		drainAt("spot", "z0", 2, map[string]int{"shop/a": 1})}
	blocked[0].Admitted = true
	blocked[2].Deadline = t0.Add(2 * time.Minute)
	if got := strings.Join(admitted(Admit(blocked, zero, Limits{MaxParallel: 2})), " "); got != "spot" {
		t.Errorf("admitted %q next to a running drain, want spot (its deadline), not patient (no room)", got)
	}
	if got := admitted(Admit(blocked, zero, Limits{MaxParallel: 1})); len(got) != 0 {
		t.Errorf("admitted %v with every slot taken, want none", got)
	}
}
