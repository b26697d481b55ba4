package schedule

import (
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// filterFor returns the filter that turns drains away with reason.
func filterFor(t *testing.T, reason string) filter {
	t.Helper()
	for _, f := range filters {
		if f.reason == reason {
			return f
		}
	}
	t.Fatalf("no filter gives %s", reason)
	return filter{}
}

// TestFilters asks each filter alone, in the room the running drains
// leave, whether it lets a drain through and, if it does not, why.
func TestFilters(t *testing.T) {
	pdbs := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 1, 1), testutil.PDB("shop", "b", "b", 2, 2)}
	oneZone := Limits{MaxParallel: 3, Topology: []TopologyLimit{{Key: "zone", MaxUnavailable: 1}}}
	rackToo := Limits{MaxParallel: 3, Topology: []TopologyLimit{{Key: "zone", MaxUnavailable: 2}, {Key: "rack", MaxUnavailable: 1}}}
	inRack := func(d Drain, rack string) Drain { d.Topology["rack"] = rack; return d }
	withDeadline := func(d Drain) Drain { d.Deadline = t0.Add(time.Minute); return d }
	unguarded := func(d Drain) Drain { d.Unguarded = 1; return d }
	needsA := map[string]int{"shop/a": 1}
	for _, tc := range []struct {
		name    string
		reason  string // the filter's
		limits  Limits
		running []Drain
		d       Drain
		want    string // why it turns d away; "" lets it through
	}{
		{"a free slot", WaitingForSlot, Limits{MaxParallel: 2}, []Drain{drainAt("r", "z0", 0, nil)}, drainAt("d", "z0", 1, nil), ""},
		{"every slot taken", WaitingForSlot, Limits{MaxParallel: 2}, []Drain{drainAt("r1", "z0", 0, nil), drainAt("r2", "z0", 0, nil)}, drainAt("d", "z0", 1, nil),
			"2 of 2 drains run at once (maxParallelNodes)"},
		{"no domain draining", WaitingForZone, oneZone, nil, drainAt("d", "z1", 1, nil), ""},
		{"its own zone draining", WaitingForZone, oneZone, []Drain{drainAt("r", "z1", 0, nil)}, drainAt("d", "z1", 1, nil), ""},
		{"another zone draining", WaitingForZone, oneZone, []Drain{drainAt("r", "z0", 0, nil)}, drainAt("d", "z1", 1, nil),
			"zone z1 would make 2 zone domains with draining nodes; at most 1 at once (draining now: z0)"},
		{"the first limit broken is named", WaitingForZone, rackToo, []Drain{inRack(drainAt("r", "z0", 0, nil), "k0")}, inRack(drainAt("d", "z1", 1, nil), "k1"),
			"rack k1 would make 2 rack domains with draining nodes; at most 1 at once (draining now: k0)"},
		{"room in every PDB", WaitingForPDBHeadroom, Limits{}, []Drain{drainAt("r", "z0", 0, nil)}, drainAt("d", "z0", 1, map[string]int{"shop/a": 1, "shop/b": 2}), ""},
		{"room in some PDBs", WaitingForPDBHeadroom, Limits{}, []Drain{drainAt("r", "z0", 0, needsA)}, drainAt("d", "z0", 1, map[string]int{"shop/a": 1, "shop/b": 1}), ""},
		{"a pod no PDB guards", WaitingForPDBHeadroom, Limits{}, []Drain{drainAt("r", "z0", 0, needsA)}, unguarded(drainAt("d", "z0", 1, needsA)), ""},
		{"a deadline", WaitingForPDBHeadroom, Limits{}, []Drain{drainAt("r", "z0", 0, needsA)}, withDeadline(drainAt("d", "z0", 1, needsA)), ""},
		{"nothing runs", WaitingForPDBHeadroom, Limits{}, nil, drainAt("d", "z0", 1, map[string]int{"shop/a": 2, "shop/gone": 1}), ""},
		{"no pod could go while a drain runs", WaitingForPDBHeadroom, Limits{}, []Drain{drainAt("r", "z0", 0, map[string]int{"shop/a": 2})},
			drainAt("d", "z0", 1, map[string]int{"shop/a": 1, "shop/gone": 3}),
			"none of its pods could go now: no room in PDB shop/a (allows 0, its pods here 1), PDB shop/gone (allows 0, its pods here 3) (counting what running drains still need); drains whose PDBs have room go first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoom(pdbs, tc.limits)
			for _, d := range tc.running {
				r.take(d)
			}
			f := filterFor(t, tc.reason)
			if lets := f.lets(r, tc.d); lets != (tc.want == "") {
				t.Fatalf("%s lets the drain through: %v, want %v", tc.reason, lets, tc.want == "")
			}
			if tc.want != "" {
				if got := f.why(r, tc.d); got != tc.want {
					t.Errorf("why:\n got %q\nwant %q", got, tc.want)
				}
			}
		})
	}
}

// TestFiltersOrder: a drain several filters turn away waits for the first
// of them, in the filters' order: a slot, then the topology, then the PDBs.
func TestFiltersOrder(t *testing.T) {
	pdbs := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 0, 0)}
	l := Limits{MaxParallel: 1, Topology: []TopologyLimit{{Key: "zone", MaxUnavailable: 1}}}
	r := newRoom(pdbs, l)
	r.take(drainAt("r", "z0", 0, nil))
	d := drainAt("d", "z1", 1, map[string]int{"shop/a": 1}) // every filter turns it away
	if f := r.turnedAwayBy(d); f == nil || f.reason != WaitingForSlot {
		t.Fatalf("turned away by %+v, want the slot filter first", f)
	}
	r.limits.MaxParallel = 2
	if f := r.turnedAwayBy(d); f == nil || f.reason != WaitingForZone {
		t.Fatalf("turned away by %+v with a slot free, want the topology filter", f)
	}
	r.limits.Topology = nil
	if f := r.turnedAwayBy(d); f == nil || f.reason != WaitingForPDBHeadroom {
		t.Fatalf("turned away by %+v with a slot and a zone free, want the PDB filter", f)
	}
	if f := r.turnedAwayBy(drainAt("free", "z1", 1, nil)); f != nil {
		t.Errorf("a drain with nothing in its way is turned away by %s", f.reason)
	}
}

// TestAdmissionOrder: of the drains every filter lets through, a deadline
// starts first, then a drain with room in all its PDBs, then the queue's
// order (first requested, then by name); the queue itself ignores PDB room.
func TestAdmissionOrder(t *testing.T) {
	pdbs := []*policyv1.PodDisruptionBudget{testutil.PDB("shop", "a", "a", 0, 0)}
	r := newRoom(pdbs, Limits{MaxParallel: 5})
	noRoom := drainAt("no-room", "z0", 0, map[string]int{"shop/a": 1})
	room := drainAt("room", "z0", 1, nil)
	sameTime := drainAt("aa-room", "z0", 1, nil)
	soon := drainAt("soon", "z0", 2, map[string]int{"shop/a": 1})
	soon.Deadline = t0.Add(time.Minute)
	later := drainAt("later", "z0", 0, nil)
	later.Deadline = t0.Add(time.Hour)
	for _, tc := range []struct {
		a, b        Drain
		starts, que bool // a before b: to start, in the queue
	}{
		{soon, later, true, true},   // the earlier deadline
		{later, room, true, true},   // a deadline before none
		{room, noRoom, true, false}, // room in its PDBs starts first; the queue keeps request order
		{noRoom, room, false, true},
		{sameTime, room, true, true}, // requested together: by name
		{room, sameTime, false, false},
	} {
		if got := r.startsBefore(tc.a, tc.b); got != tc.starts {
			t.Errorf("%s starts before %s: %v, want %v", tc.a.Node, tc.b.Node, got, tc.starts)
		}
		if got := queuedBefore(tc.a, tc.b); got != tc.que {
			t.Errorf("%s queued before %s: %v, want %v", tc.a.Node, tc.b.Node, got, tc.que)
		}
	}
	if got := r.next([]Drain{noRoom, room, sameTime}); got != 2 {
		t.Errorf("next starts drain %d, want 2 (aa-room: room in its PDBs, first by name)", got)
	}
}
