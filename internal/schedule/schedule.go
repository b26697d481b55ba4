// Package schedule decides which of the requested drains may start now
// (admission), as a pure function of the drains, their nodes' topology, the
// PDBs and the policy's limits. It is the planner of many drains at once;
// the controller carries its verdicts out (Admitted=True, or False with the
// reason and the drain's place in the queue).
//
// Rules, in order, for the drains not yet admitted (the filters of
// filters.go, then the admission order of order.go):
//   - at most MaxParallel drains run at once (admitted ones count);
//   - per topology key (for example the zone), at most MaxUnavailable
//     domains have running drains;
//   - drains whose pods' PDBs all have headroom go first, counting the
//     disruptions the running drains still need; then drains that can let
//     at least one pod go now (a PDB with room, or a pod no PDB guards);
//     a drain none of whose pods could go now waits while another drain
//     runs (it would hold a slot and evict nothing);
//   - otherwise first requested, first admitted.
//
// A drain with a deadline (the machine goes away then) comes before all
// the others, earliest deadline first, and takes the next free slot even
// if none of its pods could go now: it cannot wait for the budgets, and
// its cordon and evacuations can start. It never takes more than the
// policy's limits allow.
package schedule

import (
	"fmt"
	"slices"
	"sort"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Reasons a drain waits.
const (
	WaitingForSlot        = "WaitingForSlot"
	WaitingForZone        = "WaitingForZone"
	WaitingForPDBHeadroom = "WaitingForPDBHeadroom"
)

// Drain is one requested drain, as admission sees it.
type Drain struct {
	Node string
	// Topology are the node's values of the limited topology keys.
	Topology map[string]string
	// Requested is when the drain was requested (its NodeDrain's creation).
	Requested time.Time
	// Admitted is set for drains already running.
	Admitted bool
	// PDBs are, per PDB (namespace/name) guarding pods that must still leave
	// the node, how many of those pods it guards. For a running drain these
	// are the disruptions it will still need.
	PDBs map[string]int
	// Unguarded is how many pods that must still leave the node no PDB
	// guards: they can go at once.
	Unguarded int
	// Deadline, when set, is when the node must be empty (its requesters'
	// earliest deadline).
	Deadline time.Time
}

// TopologyLimit bounds the domains of a key with running drains.
type TopologyLimit struct {
	Key            string
	MaxUnavailable int
}

// Limits are a policy's concurrency settings, resolved.
type Limits struct {
	MaxParallel int
	Topology    []TopologyLimit
}

// MaxParallel resolves maxParallelNodes (a number, or a percentage of the
// governed nodes, rounded down but at least 1). Unset means 1.
func MaxParallel(v *intstr.IntOrString, governed int) (int, error) {
	if v == nil {
		return 1, nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, governed, false)
	if err != nil {
		return 0, fmt.Errorf("maxParallelNodes %s: %w", v.String(), err)
	}
	return max(n, 1), nil
}

// Verdict is admission's answer for one waiting drain.
type Verdict struct {
	Node   string
	Admit  bool
	Reason string
	// Position is the drain's place in the queue by request order, for
	// waiting drains; a later drain whose PDBs have room may start first.
	Position int
	Message  string
}

// Admit decides, for each drain not yet admitted, whether it starts now,
// given the PDBs' current allowed disruptions. It admits greedily, one drain
// at a time: of the drains every filter lets through (filters.go: a free
// slot, the topology limits, the PDB budget), the first in admission order
// (order.go) starts and takes its room, until none is let through. A drain
// with room in only some of its PDBs fills the slots left after those with
// room in all of theirs: part of its node can go now, and a free slot helps
// nobody. A drain none of whose pods could go now waits
// (WaitingForPDBHeadroom) while any other drain runs; it starts only when
// nothing else does, so something always moves. Verdicts come in that order:
// the admitted, then the queue, each waiting for the first filter that turns
// it away.
func Admit(drains []Drain, pdbs []*policyv1.PodDisruptionBudget, l Limits) []Verdict {
	r := newRoom(pdbs, l)
	var waiting []Drain
	for _, d := range drains {
		if d.Admitted {
			r.take(d)
		} else {
			waiting = append(waiting, d)
		}
	}
	var verdicts []Verdict
	for i := r.next(waiting); i >= 0; i = r.next(waiting) {
		verdicts = append(verdicts, Verdict{Node: waiting[i].Node, Admit: true})
		r.take(waiting[i])
		waiting = slices.Delete(waiting, i, i+1)
	}
	// No filter lets any of the rest through now: each waits for the first
	// that turns it away.
	sort.SliceStable(waiting, func(i, j int) bool { return queuedBefore(waiting[i], waiting[j]) })
	for i, d := range waiting {
		f := r.turnedAwayBy(d)
		verdicts = append(verdicts, Verdict{Node: d.Node, Position: i + 1, Reason: f.reason,
			Message: fmt.Sprintf("queued at position %d: %s", i+1, f.why(r, d))})
	}
	return verdicts
}
