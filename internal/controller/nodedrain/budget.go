package nodedrain

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// pdbBudget is how many more evictions each PodDisruptionBudget (by
// namespace/name) lets through now, as this pass sees it: the cached
// status.disruptionsAllowed, less the evictions already on their way. It
// keeps vacate from trying every waiting pod of a PDB when one disruption
// frees up: the extra tries could only be refused (429).
type pdbBudget struct {
	left map[string]int
	// pdbs are the PDBs as the plan saw them, for their fingerprints
	// (whether one changed since a pod was last tried at once).
	pdbs map[string]*policyv1.PodDisruptionBudget
}

// pdbBudgets computes the budgets of the PDBs that guard the plan's
// evictions, from the PDBs as the plan saw them, so that plan and budgets
// see the same statuses, less the evictions of every drain (not only this
// one's: drains of many nodes share PDBs) already on their way, as the
// eviction queue knows them (eviction.Queue.Budget): queued or in flight
// without a PDB refusal, reserved for a pod out of service, tried again at
// once and not answered yet, or succeeded while the cache does not show the
// pod terminating yet. Only the plan's PDBs are looked at: a pass costs its
// node's pods, not the cluster's PDBs. The caller holds r.budgetMu until
// it has queued what the budgets let through.
func (r *Reconciler) pdbBudgets(ctx context.Context, plan drain.Plan) pdbBudget {
	b := pdbBudget{pdbs: plan.PDBs}
	if len(plan.PDBs) == 0 {
		return b
	}
	b.left = r.Evictions.Budget(plan.PDBs, func(uid types.UID, key types.NamespacedName) bool {
		pod := &corev1.Pod{}
		err := r.Client.Get(ctx, key, pod)
		return err == nil && pod.UID == uid && pod.DeletionTimestamp.IsZero()
	})
	return b
}

// pdbState fingerprints the parts of a PDB's status that a retry depends
// on.
func pdbState(p *policyv1.PodDisruptionBudget) string {
	return fmt.Sprintf("%d/%d/%d", p.Generation, p.Status.ObservedGeneration, p.Status.DisruptionsAllowed)
}

// take uses one eviction of each of the pods' PDBs, if every one has one
// left; pods without a PDB always may.
func (b pdbBudget) take(pdbs []string) bool {
	for _, k := range pdbs {
		if b.left[k] <= 0 {
			return false
		}
	}
	for _, k := range pdbs {
		b.left[k]--
	}
	return true
}

// fingerprint is the state of the pod's PDBs.
func (b pdbBudget) fingerprint(pdbs []string) string {
	parts := make([]string, 0, len(pdbs))
	for _, k := range pdbs {
		state := "unknown"
		if p := b.pdbs[k]; p != nil {
			state = pdbState(p)
		}
		parts = append(parts, k+"="+state)
	}
	return strings.Join(parts, ",")
}

// request is the eviction of the decision's pod under the pass's policy,
// with its PDBs and their marks as the plan saw them.
func (b pdbBudget) request(s *scope, d drain.Decision) eviction.Request {
	req := eviction.PodRequest(d.Pod, s.policy.Grace, s.policy.PerNode)
	req.PDBs, req.Marks = d.PDBs, eviction.MarksOf(d.Pod.Name, d.PDBs, b.pdbs)
	return req
}

// queueEviction queues the pod's eviction within its PDBs' budget, or,
// when what refused it has changed (its PDB's status changed and allows a
// disruption, or only one PDB selects it now), tries it again at once, also
// within the budget. Other pods of a PDB wait: the PDB's next change wakes
// the drain.
func (r *Reconciler) queueEviction(s *scope, d drain.Decision, rec podRecord, budget pdbBudget) error {
	switch {
	case rec.Evicted:
		return nil // the cache does not show it terminating yet
	case !rec.Pending:
		if !budget.take(d.PDBs) {
			return nil
		}
		return r.Evictions.Add(budget.request(s, d))
	}
	state := budget.fingerprint(d.PDBs)
	if rec.Refused && resolvedBy(rec.Refusal, d, state) && budget.take(d.PDBs) {
		r.Evictions.RetryNow(d.Pod.UID, state)
	}
	return nil
}

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
