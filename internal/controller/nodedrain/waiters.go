package nodedrain

import (
	"cmp"
	"slices"
	"sync"
)

// pdbWaiters are, per PDB, the drains with a pod that waits for that PDB's
// budget: its eviction is not queued because the budget has nothing left,
// or the API server refused it for the PDB and it waits to be tried again.
// Only an event that can let such a pod go wakes a drain: a PDB's status
// that allows a disruption, or an evicted pod that stops counting against
// the budget (drainsOfPod). A change that allows nothing wakes no drain; a
// drain with no pod waiting on the PDB is not woken by it at all.
//
// An event wakes no more waiters than it frees disruptions, those waiting
// longest first: twenty drains waiting on a PDB that allows one more
// eviction would run twenty passes for one eviction. A woken drain whose
// pass no longer waits on the PDB passes its wake-up on to the next waiter
// (it may not have used the disruption: its pod left, or it was held); one
// that still waits found the budget taken.
//
// A pass records what it waits on at its end, from caches it read
// earlier. An event that arrives between the read and the record would find
// no waiter: every event that wakes waiters also stamps its PDB with a
// counter, and a pass whose PDBs were stamped after it started (since)
// runs again at once.
type pdbWaiters struct {
	mu      sync.Mutex
	clock   uint64
	stamped map[string]uint64            // PDB -> clock of its last waking event (kept: one per PDB)
	byPDB   map[string]map[string]uint64 // PDB -> drains waiting on it, with the clock when each began to
	byDrain map[string][]string          // drain -> PDBs it waits on
	woken   map[string]map[string]bool   // drain -> PDBs it was woken for since its last record
}

// now is the counter a pass starts at.
func (w *pdbWaiters) now() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clock
}

// wake stamps the PDB and returns up to n of the drains waiting on it,
// those waiting longest first (n < 0: all of them).
func (w *pdbWaiters) wake(pdb string, n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock++
	if w.stamped == nil {
		w.stamped = map[string]uint64{}
	}
	w.stamped[pdb] = w.clock
	waiting := w.byPDB[pdb]
	out := make([]string, 0, len(waiting))
	for d := range waiting {
		out = append(out, d)
	}
	if n >= 0 && n < len(out) {
		slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(waiting[a], waiting[b]), cmp.Compare(a, b)) })
		out = out[:n]
	}
	for _, d := range out {
		if w.woken == nil {
			w.woken = map[string]map[string]bool{}
		}
		if w.woken[d] == nil {
			w.woken[d] = map[string]bool{}
		}
		w.woken[d][pdb] = true
	}
	return out
}

// wait records the PDBs the drain waits on now (replacing what it waited
// on; a PDB it waited on already keeps its place in line), and reports
// whether one of them was stamped after since: the pass that decided to
// wait may have read a state older than that event. It returns the PDBs
// the drain was woken for and no longer waits on: their wake-ups pass on.
func (w *pdbWaiters) wait(drain string, pdbs []string, since uint64) (missed bool, passOn []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	began := map[string]uint64{}
	for _, p := range w.byDrain[drain] {
		began[p] = w.byPDB[p][drain]
	}
	passOn = w.forgetLocked(drain, pdbs)
	if len(pdbs) == 0 {
		return false, passOn
	}
	if w.byPDB == nil {
		w.byPDB, w.byDrain = map[string]map[string]uint64{}, map[string][]string{}
	}
	w.byDrain[drain] = pdbs
	for _, p := range pdbs {
		if w.byPDB[p] == nil {
			w.byPDB[p] = map[string]uint64{}
		}
		if _, ok := began[p]; !ok {
			began[p] = w.clock
		}
		w.byPDB[p][drain] = began[p]
		missed = missed || w.stamped[p] > since
	}
	return missed, passOn
}

// gone forgets a deleted PDB's stamp (the deletion wakes the drains of its
// pods itself).
func (w *pdbWaiters) gone(pdb string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.stamped, pdb)
}

// forget drops what the drain waits on: it stopped. It returns the PDBs it
// was woken for: their wake-ups pass on.
func (w *pdbWaiters) forget(drain string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.forgetLocked(drain, nil)
}

// forgetLocked drops what the drain waits on, and returns the PDBs it was
// woken for, other than those it still waits on (still).
func (w *pdbWaiters) forgetLocked(drain string, still []string) (passOn []string) {
	for _, p := range w.byDrain[drain] {
		delete(w.byPDB[p], drain)
		if len(w.byPDB[p]) == 0 {
			delete(w.byPDB, p)
		}
	}
	delete(w.byDrain, drain)
	for p := range w.woken[drain] {
		if !slices.Contains(still, p) {
			passOn = append(passOn, p)
		}
	}
	delete(w.woken, drain)
	slices.Sort(passOn)
	return passOn
}
