package schedule

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	policyv1 "k8s.io/api/policy/v1"
)

// room is what the running drains, and those admitted so far in this pass,
// leave to the waiting ones: slots, topology domains and PDB disruptions.
// The filters ask it; each admission takes from it.
type room struct {
	limits Limits
	// running counts the drains that hold a slot.
	running int
	// domains are, per limited topology key, the values with running drains.
	domains map[string]map[string]bool
	// allowed are the PDBs' (namespace/name) disruptions allowed now, less
	// those the running drains' pods still to go will take.
	allowed map[string]int
}

// newRoom is the room before any drain runs: every slot free, no domain
// draining, each PDB's disruptions allowed now.
func newRoom(pdbs []*policyv1.PodDisruptionBudget, l Limits) *room {
	r := &room{limits: l, allowed: map[string]int{}, domains: map[string]map[string]bool{}}
	for _, p := range pdbs {
		r.allowed[p.Namespace+"/"+p.Name] = int(p.Status.DisruptionsAllowed)
	}
	for _, lim := range l.Topology {
		r.domains[lim.Key] = map[string]bool{}
	}
	return r
}

// take records a running drain: it holds a slot, its domains are draining,
// and its pods still to go will take their PDBs' room from the drains after.
func (r *room) take(d Drain) {
	r.running++
	for key, vals := range r.domains {
		vals[d.Topology[key]] = true
	}
	for name, n := range d.PDBs {
		r.allowed[name] -= n
	}
}

// A filter is one reason a waiting drain may not start now. Like the
// Filter plugins of kube-scheduler's framework, it only lets a drain through
// or turns it away, saying why; which of the drains let through starts
// first is the admission order's business (order.go).
type filter struct {
	// reason is the verdict's reason for a drain the filter turns away.
	reason string
	// lets says whether d may start now, as far as this filter goes.
	lets func(r *room, d Drain) bool
	// why says why a drain the filter turns away waits: its verdict's
	// message, after its place in the queue.
	why func(r *room, d Drain) string
}

// filters are asked in this order: a drain starts only if every one lets
// it through, and the first that turns it away gives its verdict.
var filters = []filter{
	{WaitingForSlot, freeSlot, slotsTaken},
	{WaitingForZone, topologyRoom, topologyFull},
	{WaitingForPDBHeadroom, budgetRoom, budgetShort},
}

// turnedAwayBy returns the first filter that turns d away, or nil if every
// one lets it through.
func (r *room) turnedAwayBy(d Drain) *filter {
	for i := range filters {
		if !filters[i].lets(r, d) {
			return &filters[i]
		}
	}
	return nil
}

// freeSlot lets a drain through while fewer than MaxParallel drains run
// (maxParallelNodes; the drains admitted before count).
func freeSlot(r *room, _ Drain) bool { return r.running < r.limits.MaxParallel }

// slotsTaken is freeSlot's message.
func slotsTaken(r *room, _ Drain) string {
	return fmt.Sprintf("%d of %d drains run at once (maxParallelNodes)", r.running, r.limits.MaxParallel)
}

// topologyRoom lets a drain through unless it breaks a topology limit.
func topologyRoom(r *room, d Drain) bool {
	_, broken := r.brokenTopologyLimit(d)
	return !broken
}

// topologyFull is topologyRoom's message: the first limit d would break,
// and the domains draining now.
func topologyFull(r *room, d Drain) string {
	lim, _ := r.brokenTopologyLimit(d)
	v := d.Topology[lim.Key]
	return fmt.Sprintf("%s %s would make %d %s domains with draining nodes; at most %d at once (draining now: %s)",
		lim.Key, v, len(r.domains[lim.Key])+1, lim.Key, lim.MaxUnavailable, strings.Join(slices.Sorted(maps.Keys(r.domains[lim.Key])), ", "))
}

// brokenTopologyLimit returns the first of the policy's topology limits
// that d would break by starting now: its domain of the key (its zone, say)
// has no running drain, and MaxUnavailable domains of the key already have.
func (r *room) brokenTopologyLimit(d Drain) (TopologyLimit, bool) {
	for _, lim := range r.limits.Topology {
		if !r.domains[lim.Key][d.Topology[lim.Key]] && len(r.domains[lim.Key]) >= lim.MaxUnavailable {
			return lim, true
		}
	}
	return TopologyLimit{}, false
}

// budgetRoom turns away a drain none of whose pods could go now (no room
// in any of its PDBs, counting what the running drains still need, and no
// pod that no PDB guards) while another drain runs: it would hold a slot
// and evict nothing. A drain with a deadline cannot wait for the budgets
// (its machine goes away then; its cordon and evacuations can start) and
// is let through; so is every drain while nothing runs, so that something
// always moves.
func budgetRoom(r *room, d Drain) bool {
	return !d.Deadline.IsZero() || r.running == 0 || r.headroom(d) || r.movable(d)
}

// budgetShort is budgetRoom's message: the PDBs without room, with what
// they allow.
func budgetShort(r *room, d Drain) string {
	var short []string
	for name, n := range d.PDBs {
		if r.allowed[name] < min(n, 1) {
			short = append(short, fmt.Sprintf("PDB %s (allows %d, its pods here %d)", name, max(r.allowed[name], 0), n))
		}
	}
	sort.Strings(short)
	return fmt.Sprintf("none of its pods could go now: no room in %s (counting what running drains still need); drains whose PDBs have room go first",
		strings.Join(short, ", "))
}

// headroom says whether every PDB guarding d's pods has room for them now.
func (r *room) headroom(d Drain) bool {
	for name, n := range d.PDBs {
		if r.allowed[name] < min(n, 1) {
			return false
		}
	}
	return true
}

// movable says whether some of d's pods could go now: one no PDB guards,
// or one of a PDB with room.
func (r *room) movable(d Drain) bool {
	if d.Unguarded > 0 || len(d.PDBs) == 0 {
		return true
	}
	for name := range d.PDBs {
		if r.allowed[name] >= 1 {
			return true
		}
	}
	return false
}
