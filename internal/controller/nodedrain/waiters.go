package nodedrain

import (
	"sync"
)

// pdbWaiters are, per PDB, the drains with a pod that waits for that PDB's
// budget: its eviction is not queued because the budget has nothing left,
// or the API server refused it for the PDB and it waits to be tried again.
// Only an event that can let such a pod go wakes a drain: a PDB's status
// that allows more disruptions than before (mayFree), or an evicted pod that
// stops counting against the budget (drainsOfPod). A change that frees
// nothing wakes no drain; a
// drain with no pod waiting on the PDB is not woken by it at all. (Before,
// every change of a PDB woke every running drain with a pod it selects: at
// 10,000 pods and 20 drains, four passes per change.)
//
// A pass records what it waits on at its end, from caches it read
// earlier. An event that arrives between the read and the record would find
// no waiter: every event that wakes waiters also stamps its PDB with a
// counter, and a pass whose PDBs were stamped after it started (since)
// runs again at once.
type pdbWaiters struct {
	mu      sync.Mutex
	clock   uint64
	stamped map[string]uint64          // PDB -> clock of its last waking event (kept: one per PDB)
	byPDB   map[string]map[string]bool // PDB -> drains waiting on it
	byDrain map[string][]string        // drain -> PDBs it waits on
}

// now is the counter a pass starts at.
func (w *pdbWaiters) now() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clock
}

// wake stamps the PDB and returns the drains waiting on it.
func (w *pdbWaiters) wake(pdb string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock++
	if w.stamped == nil {
		w.stamped = map[string]uint64{}
	}
	w.stamped[pdb] = w.clock
	out := make([]string, 0, len(w.byPDB[pdb]))
	for d := range w.byPDB[pdb] {
		out = append(out, d)
	}
	return out
}

// wait records the PDBs the drain waits on now (replacing what it waited
// on), and reports whether one of them was stamped after since: the pass
// that decided to wait may have read a state older than that event.
func (w *pdbWaiters) wait(drain string, pdbs []string, since uint64) (missed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(drain)
	if len(pdbs) == 0 {
		return false
	}
	if w.byPDB == nil {
		w.byPDB, w.byDrain = map[string]map[string]bool{}, map[string][]string{}
	}
	w.byDrain[drain] = pdbs
	for _, p := range pdbs {
		if w.byPDB[p] == nil {
			w.byPDB[p] = map[string]bool{}
		}
		w.byPDB[p][drain] = true
		missed = missed || w.stamped[p] > since
	}
	return missed
}

// gone forgets a deleted PDB's stamp (the deletion wakes the drains of its
// pods itself).
func (w *pdbWaiters) gone(pdb string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.stamped, pdb)
}

// forget drops what the drain waits on: it stopped.
func (w *pdbWaiters) forget(drain string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.forgetLocked(drain)
}

func (w *pdbWaiters) forgetLocked(drain string) {
	for _, p := range w.byDrain[drain] {
		delete(w.byPDB[p], drain)
		if len(w.byPDB[p]) == 0 {
			delete(w.byPDB, p)
		}
	}
	delete(w.byDrain, drain)
}
