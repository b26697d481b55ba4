package nodedrain

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// ledger is what the controller remembers of the pods whose evictions it
// started, across all drains: one entry per pod UID, under one lock. With
// the eviction queue's state it answers whether a pod's eviction is
// underway (it counts against its PDBs' budget) and whether it waits on
// that budget.
//
// An entry goes once all its parts are gone: the claim once the eviction is
// no longer underway, the refusal on the eviction's last answer (evicted,
// gone, held), the gate and dry-run time when the pod is evicted or back in
// service; the refusal, gate and dry-run time also when the node's drain
// stops.
//
// Nothing is called while mu is held: the queue's state and the cache are
// read after it is released.
type ledger struct {
	mu   sync.Mutex
	pods map[types.UID]*entry
	// byPDB are the claiming pods of each PDB: a pass looks only at the
	// claims of its PDBs.
	byPDB map[string]map[types.UID]bool
}

// entry is what the ledger knows of one pod.
type entry struct {
	node string
	// pod and pdbs are the claim: the PDBs of a pod whose eviction was
	// queued, tried again at once, or that was taken out of service for it,
	// so that a budget counts the evictions of every drain (budget.go).
	pod  types.NamespacedName
	pdbs []string
	// marks are the pod's entries in each PDB's status.disruptedPods when
	// it was claimed (zero if none), by the index of pdbs: a newer entry
	// says the PDB counts the eviction (countedBy).
	marks []metav1.Time
	// refusal is the latest refusal of the pod's eviction, if refused.
	refusal refusal
	refused bool
	// gate is what is known of a pod taken out of service, if gated
	// (endpoints.go).
	gate  gate
	gated bool
	// tried is when the pod's dry-run eviction was last made.
	tried time.Time
}

func (e entry) empty() bool {
	return len(e.pdbs) == 0 && !e.refused && !e.gated && e.tried.IsZero()
}

// outOfService says whether the pod is out of service for its eviction and
// not queued yet: its PDBs' budget counts it.
func (e entry) outOfService() bool {
	return e.gated && !e.gate.queued
}

// pdbRefused says whether the pod's eviction was refused for a PDB and is
// not being tried again at once.
func (e entry) pdbRefused() bool {
	return e.refused && e.refusal.result == eviction.PDBBlocked && !e.refusal.retrying
}

// waitsOnBudget says whether the pod's eviction, after a pass, waits for a
// change of its PDBs: not queued for want of budget, or refused for a PDB
// and not being tried again. A queued eviction's answer, and an evicted
// pod's termination, wake the drain on their own.
func (e entry) waitsOnBudget(uid types.UID, q *eviction.Queue) bool {
	switch {
	case q.Evicted(uid), e.outOfService():
		return false
	}
	return !q.Pending(uid) || e.pdbRefused()
}

// podRecord is what the controller remembers of one pod's eviction, read
// at once: its ledger entry and the eviction queue's state.
type podRecord struct {
	entry
	pending, evicted bool
}

// recordOf reads the pod's record.
func (l *ledger) recordOf(uid types.UID, q *eviction.Queue) podRecord {
	return podRecord{entry: l.get(uid), pending: q.Pending(uid), evicted: q.Evicted(uid)}
}

// waitsOnBudget is entry.waitsOnBudget for the decision's pod; a pod
// without a PDB never waits on one.
func (l *ledger) waitsOnBudget(d drain.Decision, q *eviction.Queue) bool {
	return len(d.PDBs) > 0 && l.get(d.Pod.UID).waitsOnBudget(d.Pod.UID, q)
}

// underway takes from left (budgets by PDB: the PDBs a pass needs, as
// pdbs shows them) one for each pod whose eviction is underway and that
// PDB's status does not count yet, and drops the claims of those pods that
// are no longer underway. Claims of other PDBs are not looked at: each
// check may read the pod, and a pass costs its node's PDBs, not every
// eviction of every drain. Claims change only under r.budgetMu, which the
// caller holds, so a claim dropped here is the one that was checked.
func (l *ledger) underway(left map[string]int, pdbs map[string]*policyv1.PodDisruptionBudget, q *eviction.Queue, running func(types.UID, types.NamespacedName) bool) {
	var over []types.UID
	for _, c := range l.claimsOf(left) {
		if !c.underway(q, running) {
			over = append(over, c.uid)
			continue
		}
		for i, p := range c.pdbs {
			if _, needed := left[p]; needed && !countedBy(pdbs[p], c.pod.Name, c.marks[i]) {
				left[p]--
			}
		}
	}
	if len(over) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, uid := range over {
		if e := l.pods[uid]; e != nil {
			l.unclaimLocked(uid, e)
			l.dropIfEmptyLocked(uid, e)
		}
	}
}

// claimed is what underway needs of a claiming pod's entry, read under the
// lock: a pass reads a few hundred of them, and whole entries copied into a
// map were a tenth of the controller's CPU at 10,000 pods.
type claimed struct {
	uid          types.UID
	pod          types.NamespacedName
	pdbs         []string // the entry's own slices: claim replaces them, never changes them
	marks        []metav1.Time
	outOfService bool
	pdbRefused   bool
}

// underway says whether the pod's eviction counts against its PDBs'
// budget: taken out of service for it (an endpoint-aware pod), evicted
// while the cache still shows the pod not terminating (running: the PDB's
// status does not count it yet), or queued and not waiting on a PDB
// refusal.
func (c claimed) underway(q *eviction.Queue, running func(types.UID, types.NamespacedName) bool) bool {
	switch {
	case c.outOfService:
		return true
	case q.Evicted(c.uid):
		return running(c.uid, c.pod)
	}
	return q.Pending(c.uid) && !c.pdbRefused
}

// claimsOf are the claims of the pods claiming one of the PDBs, each once.
func (l *ledger) claimsOf(pdbs map[string]int) []claimed {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []claimed
	var twice map[types.UID]bool // pods claiming more than one PDB, seen
	for k := range pdbs {
		for uid := range l.byPDB[k] {
			e := l.pods[uid]
			if len(e.pdbs) > 1 {
				if twice[uid] {
					continue
				}
				if twice == nil {
					twice = map[types.UID]bool{}
				}
				twice[uid] = true
			}
			out = append(out, claimed{uid: uid, pod: e.pod, pdbs: e.pdbs, marks: e.marks, outOfService: e.outOfService(), pdbRefused: e.pdbRefused()})
		}
	}
	return out
}

// update runs f on the pod's entry (a new one if it has none) under the
// lock, and keeps the entry only if f left something in it.
func (l *ledger) update(uid types.UID, node string, f func(*entry)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.pods[uid]
	if !ok {
		e = &entry{node: node}
	}
	f(e)
	switch {
	case !ok && !e.empty():
		if l.pods == nil {
			l.pods = map[types.UID]*entry{}
		}
		l.pods[uid] = e
	case ok:
		l.dropIfEmptyLocked(uid, e)
	}
}

func (l *ledger) dropIfEmptyLocked(uid types.UID, e *entry) {
	if e.empty() {
		delete(l.pods, uid)
	}
}

// get is a copy of the pod's entry; the zero entry if it has none.
func (l *ledger) get(uid types.UID) entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.pods[uid]; e != nil {
		return *e
	}
	return entry{}
}

// claim records the PDBs of a pod whose eviction is queued, tried again or
// that is taken out of service for it, with the pod's entries in their
// status.disruptedPods as the cache shows them now; no PDBs drop its
// claim.
func (l *ledger) claim(pod *corev1.Pod, pdbs []string, guards *drain.Guards) {
	marks := make([]metav1.Time, len(pdbs))
	for i, k := range pdbs {
		if p := guards.Get(k); p != nil {
			marks[i] = p.Status.DisruptedPods[pod.Name]
		}
	}
	l.update(pod.UID, pod.Spec.NodeName, func(e *entry) {
		l.unclaimLocked(pod.UID, e)
		if len(pdbs) == 0 {
			return
		}
		e.pod, e.pdbs, e.marks = types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, pdbs, marks
		if l.byPDB == nil {
			l.byPDB = map[string]map[types.UID]bool{}
		}
		for _, k := range pdbs {
			if l.byPDB[k] == nil {
				l.byPDB[k] = map[types.UID]bool{}
			}
			l.byPDB[k][pod.UID] = true
		}
	})
}

// unclaimLocked drops the pod's claim.
func (l *ledger) unclaimLocked(uid types.UID, e *entry) {
	for _, k := range e.pdbs {
		delete(l.byPDB[k], uid)
		if len(l.byPDB[k]) == 0 {
			delete(l.byPDB, k)
		}
	}
	e.pod, e.pdbs, e.marks = types.NamespacedName{}, nil, nil
}

// countedBy says whether the PDB's status already counts the eviction of
// the pod claimed with mark: the eviction API takes one from
// disruptionsAllowed and records the pod in disruptedPods in the same
// write, and the disruption controller keeps the pod out of the healthy
// count from then on. An entry newer than the one the PDB had when the pod
// was claimed is that write: a budget that also counted the claim would
// count the eviction twice, and hold a pod back for a disruption the PDB
// allows. A nil PDB counts nothing.
func countedBy(pdb *policyv1.PodDisruptionBudget, pod string, mark metav1.Time) bool {
	if pdb == nil {
		return false
	}
	at, ok := pdb.Status.DisruptedPods[pod]
	return ok && !at.Equal(&mark)
}

// countedByAll says whether every PDB the pod's eviction claimed already
// counts it (countedBy), as guards show them now: its claim takes nothing
// from any budget, so its end gives nothing back.
func (l *ledger) countedByAll(uid types.UID, guards *drain.Guards) bool {
	e := l.get(uid)
	if len(e.pdbs) == 0 {
		return false
	}
	for i, k := range e.pdbs {
		if !countedBy(guards.Get(k), e.pod.Name, e.marks[i]) {
			return false
		}
	}
	return true
}

// pdbsOf are the PDBs claimed by the pod's eviction, if any.
func (l *ledger) pdbsOf(uid types.UID) []string {
	return l.get(uid).pdbs
}

// record keeps the answer to the pod's eviction: a refusal replaces the
// previous one (keeping its since and retriedAt when it is the same
// refusal); evicted, gone or held drop it.
func (l *ledger) record(o eviction.Outcome) {
	l.update(o.UID, o.Node, func(e *entry) {
		switch o.Result {
		case eviction.Evicted, eviction.Gone, eviction.Held:
			e.refusal, e.refused = refusal{}, false
			return
		}
		if !e.refused || e.refusal.result != o.Result || e.refusal.code != o.Code {
			e.refusal = refusal{since: o.At, result: o.Result, code: o.Code}
		}
		e.refusal.message, e.refusal.retrying, e.refused = o.Message, false, true
	})
}

// retrying records that the refused pod is tried again at once, with its
// PDBs in the given state.
func (l *ledger) retrying(uid types.UID, pdbState string) {
	l.update(uid, "", func(e *entry) {
		if e.refused {
			e.refusal.retriedAt, e.refusal.retrying = pdbState, true
		}
	})
}

// refusals is how many pods of the node have a refusal.
func (l *ledger) refusals(node string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.pods {
		if e.node == node && e.refused {
			n++
		}
	}
	return n
}

// updateGate runs f on the pod's gate, a new one if it has none.
func (l *ledger) updateGate(pod *corev1.Pod, f func(*gate)) {
	l.update(pod.UID, pod.Spec.NodeName, func(e *entry) {
		if !e.gated {
			e.gate, e.gated = gate{}, true
		}
		f(&e.gate)
	})
}

// dropGate forgets that the pod was taken out of service, and its last dry
// run.
func (l *ledger) dropGate(uid types.UID) {
	l.update(uid, "", func(e *entry) {
		e.gate, e.gated, e.tried = gate{}, false, time.Time{}
	})
}

// gateDone drops the gate of a pod whose eviction succeeded (or that is
// gone), and reports whether it had one.
func (l *ledger) gateDone(uid types.UID) (had bool) {
	l.update(uid, "", func(e *entry) {
		had = e.gated
		e.gate, e.gated, e.tried = gate{}, false, time.Time{}
	})
	return had
}

// gateRefused records that the queued eviction of a pod out of service was
// refused or held, and reports whether the pod is one.
func (l *ledger) gateRefused(o eviction.Outcome) (refused bool) {
	l.update(o.UID, "", func(e *entry) {
		if !e.gated || !e.gate.queued {
			return
		}
		e.gate.queued, e.gate.refused = false, fmt.Sprintf("%s: %s", o.Result, o.Message)
		refused = true
	})
	return refused
}

// triedAt records a dry-run eviction of the pod.
func (l *ledger) triedAt(pod *corev1.Pod, now time.Time) {
	l.update(pod.UID, pod.Spec.NodeName, func(e *entry) { e.tried = now })
}

// forgetNode drops the refusals, gates and dry-run times of the node's
// pods: its drain stopped (the serving controller puts its pods back in
// service). Claims stay until their evictions are no longer underway.
func (l *ledger) forgetNode(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, e := range l.pods {
		if e.node != node {
			continue
		}
		e.refusal, e.refused = refusal{}, false
		e.gate, e.gated, e.tried = gate{}, false, time.Time{}
		l.dropIfEmptyLocked(uid, e)
	}
}
