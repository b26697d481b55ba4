package main

import (
	"sort"
	"time"
)

// pdbState is one state of a PodDisruptionBudget's status as the watch saw
// it, stamped with the time the watch delivered it.
type pdbState struct {
	at                                  time.Time
	allowed, healthy, desired, expected int32
}

// violates reports whether the state breaks the budget: a negative
// disruptionsAllowed, or fewer healthy pods than desired while the budget
// covers pods.
func (s pdbState) violates() bool {
	return s.allowed < 0 || (s.expected > 0 && s.healthy < s.desired)
}

// waiter is a pod that has to leave a target node: it waits from the moment
// its node is cordoned (the node is draining) until an eviction of it is
// accepted.
type waiter struct {
	pod   string   // namespace/name
	pdbs  []string // namespace/name of the PDBs that select it
	from  time.Time
	until time.Time // zero: never evicted
}

// waiting reports whether the pod waits at t.
func (w waiter) waiting(t time.Time) bool {
	return !w.from.IsZero() && !t.Before(w.from) && (w.until.IsZero() || t.Before(w.until))
}

// evictionAt is an accepted eviction: of which pod, and when the API server
// accepted it (the audit event's stageTimestamp; the server may hold an
// eviction for a while, retrying its PDB update on conflicts).
type evictionAt struct {
	pod string
	at  time.Time
}

// budgetUse is how a drain used the PDBs' budgets.
type budgetUse struct {
	// idle is, per PDB that had waiting pods, how long it allowed a
	// disruption (disruptionsAllowed > 0) while one of its pods waited.
	idle map[string]time.Duration
	// delays are, for each moment a PDB started to allow a disruption while
	// one of its pods waited, the time to the next accepted eviction of one
	// of its pods.
	delays []time.Duration
}

// measureBudgets computes budget use over [start, end] from the PDBs'
// observed states (each PDB's in time order), the pods that had to leave
// and the drainer's accepted evictions (in time order).
func measureBudgets(states map[string][]pdbState, waiters []waiter, evictions []evictionAt, start, end time.Time) budgetUse {
	use := budgetUse{idle: map[string]time.Duration{}}
	byPDB := map[string][]waiter{}
	for _, w := range waiters {
		for _, p := range w.pdbs {
			byPDB[p] = append(byPDB[p], w)
		}
	}
	for pdb, ws := range byPDB {
		idle, delays, any := pdbBudget(states[pdb], ws, evictions, start, end)
		if any {
			use.idle[pdb] = idle
			use.delays = append(use.delays, delays...)
		}
	}
	return use
}

// pdbBudget is measureBudgets for one PDB; any reports whether one of its
// pods waited at all in [start, end].
func pdbBudget(states []pdbState, ws []waiter, evictions []evictionAt, start, end time.Time) (idle time.Duration, delays []time.Duration, any bool) {
	mine := map[string]bool{}
	cuts := []time.Time{start, end}
	for _, w := range ws {
		mine[w.pod] = true
		cuts = append(cuts, w.from, w.until)
	}
	for _, s := range states {
		cuts = append(cuts, s.at)
	}
	cuts = window(cuts, start, end)
	open := false // a disruption allowed while a pod waits
	for i := 0; i+1 < len(cuts); i++ {
		t := cuts[i]
		n := 0
		for _, w := range ws {
			if w.waiting(t) {
				n++
			}
		}
		any = any || n > 0
		usable := n > 0 && allowedAt(states, t) > 0
		if usable {
			idle += cuts[i+1].Sub(t)
			if !open {
				if d, ok := nextEviction(evictions, mine, t); ok {
					delays = append(delays, d)
				}
			}
		}
		open = usable
	}
	return idle, delays, any
}

// window keeps the times within [start, end], sorted and without repeats.
func window(ts []time.Time, start, end time.Time) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if !t.IsZero() && !t.Before(start) && !t.After(end) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	uniq := out[:0]
	for i, t := range out {
		if i == 0 || !t.Equal(out[i-1]) {
			uniq = append(uniq, t)
		}
	}
	return uniq
}

// allowedAt is disruptionsAllowed in the last state seen at or before t (0
// before the first).
func allowedAt(states []pdbState, t time.Time) int32 {
	var a int32
	for _, s := range states {
		if s.at.After(t) {
			break
		}
		a = s.allowed
	}
	return a
}

// nextEviction is the time from t to the first eviction at or after t of one
// of the pods.
func nextEviction(evictions []evictionAt, pods map[string]bool, t time.Time) (time.Duration, bool) {
	for _, e := range evictions {
		if pods[e.pod] && !e.at.Before(t) {
			return e.at.Sub(t), true
		}
	}
	return 0, false
}

// violations counts the states seen in [start, end] that break their budget.
func violations(states map[string][]pdbState, start, end time.Time) int {
	n := 0
	for _, ss := range states {
		for _, s := range ss {
			if !s.at.Before(start) && !s.at.After(end) && s.violates() {
				n++
			}
		}
	}
	return n
}
