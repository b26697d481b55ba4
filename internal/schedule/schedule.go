// Package schedule decides which of the requested drains may start now
// (admission), as a pure function of the drains, their nodes' topology, the
// PDBs and the policy's limits. It is the planner of many drains at once;
// the controller carries its verdicts out (Admitted=True, or False with the
// reason and the drain's place in the queue).
//
// Rules, in order, for the drains not yet admitted:
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
	"maps"
	"slices"
	"sort"
	"strings"
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
// given the PDBs' current allowed disruptions. It admits greedily, best
// first: a drain whose PDBs all have room now (counting what the drains
// admitted before it will take), then the earliest requested, then by name.
// A drain with room in only some of its PDBs fills the slots left after
// those: part of its node can go now, and a free slot helps nobody. A drain
// none of whose pods could go now waits (WaitingForPDBHeadroom) while any
// other drain runs; it starts only when nothing else does, so something
// always moves. Verdicts come in that order: the admitted, then the queue.
func Admit(drains []Drain, pdbs []*policyv1.PodDisruptionBudget, l Limits) []Verdict {
	allowed := map[string]int{}
	for _, p := range pdbs {
		allowed[p.Namespace+"/"+p.Name] = int(p.Status.DisruptionsAllowed)
	}
	running := 0
	domains := map[string]map[string]bool{} // key -> values with running drains
	for _, lim := range l.Topology {
		domains[lim.Key] = map[string]bool{}
	}
	var waiting []Drain
	for _, d := range drains {
		if !d.Admitted {
			waiting = append(waiting, d)
			continue
		}
		running++
		for key, vals := range domains {
			vals[d.Topology[key]] = true
		}
		for name, n := range d.PDBs { // its pods still to go will take that room
			allowed[name] -= n
		}
	}
	// short are the PDBs without room for a drain's pods, with what they allow.
	short := func(d Drain) []string {
		var out []string
		for name, n := range d.PDBs {
			if allowed[name] < min(n, 1) {
				out = append(out, fmt.Sprintf("PDB %s (allows %d, its pods here %d)", name, max(allowed[name], 0), n))
			}
		}
		sort.Strings(out)
		return out
	}
	headroom := func(d Drain) bool {
		for name, n := range d.PDBs {
			if allowed[name] < min(n, 1) {
				return false
			}
		}
		return true
	}
	// movable: some of the drain's pods could go now.
	movable := func(d Drain) bool {
		if d.Unguarded > 0 || len(d.PDBs) == 0 {
			return true
		}
		for name := range d.PDBs {
			if allowed[name] >= 1 {
				return true
			}
		}
		return false
	}
	fits := func(d Drain) (bool, string) {
		for _, lim := range l.Topology {
			v := d.Topology[lim.Key]
			if !domains[lim.Key][v] && len(domains[lim.Key]) >= lim.MaxUnavailable {
				return false, fmt.Sprintf("%s %s would make %d %s domains with draining nodes; at most %d at once (draining now: %s)",
					lim.Key, v, len(domains[lim.Key])+1, lim.Key, lim.MaxUnavailable, strings.Join(slices.Sorted(maps.Keys(domains[lim.Key])), ", "))
			}
		}
		return true, ""
	}
	// urgent: a's deadline comes before b's (a drain without one comes last).
	urgent := func(a, b Drain) bool {
		switch {
		case a.Deadline.IsZero():
			return false
		case b.Deadline.IsZero():
			return true
		}
		return a.Deadline.Before(b.Deadline)
	}
	better := func(a, b Drain) bool {
		if urgent(a, b) || urgent(b, a) {
			return urgent(a, b)
		}
		if !a.Requested.Equal(b.Requested) {
			return a.Requested.Before(b.Requested)
		}
		return a.Node < b.Node
	}
	var verdicts []Verdict
	for running < l.MaxParallel {
		best := -1
		for i, d := range waiting {
			if ok, _ := fits(d); !ok {
				continue
			}
			switch {
			case best < 0:
				best = i
			case urgent(d, waiting[best]) || urgent(waiting[best], d):
				if urgent(d, waiting[best]) {
					best = i
				}
			case headroom(d) != headroom(waiting[best]):
				if headroom(d) {
					best = i
				}
			case better(d, waiting[best]):
				best = i
			}
		}
		if best < 0 {
			break
		}
		if !headroom(waiting[best]) && running > 0 && waiting[best].Deadline.IsZero() {
			// None with room in all its PDBs: the earliest that can let
			// some pods go takes the slot. One that could let none go
			// would hold a slot while evicting nothing: it starts only
			// when nothing else runs.
			best = -1
			for i, d := range waiting {
				if ok, _ := fits(d); ok && movable(d) && (best < 0 || better(d, waiting[best])) {
					best = i
				}
			}
			if best < 0 {
				break
			}
		}
		d := waiting[best]
		waiting = append(waiting[:best], waiting[best+1:]...)
		verdicts = append(verdicts, Verdict{Node: d.Node, Admit: true})
		running++
		for key, vals := range domains {
			vals[d.Topology[key]] = true
		}
		for name, n := range d.PDBs { // taken from the PDB for the drains after
			allowed[name] -= n
		}
	}
	sort.SliceStable(waiting, func(i, j int) bool { return better(waiting[i], waiting[j]) })
	for i, d := range waiting {
		v := Verdict{Node: d.Node, Position: i + 1}
		ok, why := fits(d)
		switch {
		case running >= l.MaxParallel:
			v.Reason, v.Message = WaitingForSlot, fmt.Sprintf("%d of %d drains run at once (maxParallelNodes)", running, l.MaxParallel)
		case !ok:
			v.Reason, v.Message = WaitingForZone, why
		default:
			v.Reason, v.Message = WaitingForPDBHeadroom, fmt.Sprintf("none of its pods could go now: no room in %s (counting what running drains still need); drains whose PDBs have room go first",
				strings.Join(short(d), ", "))
		}
		v.Message = fmt.Sprintf("queued at position %d: %s", v.Position, v.Message)
		verdicts = append(verdicts, v)
	}
	return verdicts
}
