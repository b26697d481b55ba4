package eviction

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Evictions underway. The queue is the one store of what vacate's
// evictions are doing, for every drain: a pod is queued or in flight
// (requests), reserved (taken out of service for its eviction and not
// queued yet: Reserve), or evicted lately (evicted). Each counts against
// its PodDisruptionBudgets until their status counts it (Budget). The
// queue also keeps the latest refusal of each pod's eviction (State), for
// the caller to explain and to know when trying again is worth it. This
// file is the store's side of the queue: what callers put in (Add,
// Reserve, RetryNow, Forget, ForgetNode) and what they read (State,
// Budget); queue.go is its workers, call.go one call.

// ErrZeroGracePeriod rejects a request that would kill a pod without notice.
var ErrZeroGracePeriod = errors.New("a grace period of 0 is never used for evictions")

// Add queues an eviction unless the pod is already queued or was evicted.
func (q *Queue) Add(r Request) error {
	if r.GracePeriodSeconds != nil && *r.GracePeriodSeconds <= 0 {
		return fmt.Errorf("evicting %s: %w", r.Pod, ErrZeroGracePeriod)
	}
	now := q.opts.Clock.Now()
	q.mu.Lock()
	for uid, e := range q.evicted {
		if now.Sub(e.at) > evictedMemory {
			delete(q.evicted, uid)
			q.unclaimLocked(uid, e.req.PDBs)
		}
	}
	if _, done := q.evicted[r.UID]; done {
		q.mu.Unlock()
		return nil
	}
	// One consumer's eviction of a pod at a time: another's request, or
	// reservation (its pod out of service, counted against its PDBs), is
	// left as it is; that eviction's end serves both.
	if old, ok := q.requests[r.UID]; ok && old.For != r.For {
		q.mu.Unlock()
		return nil
	}
	if res, ok := q.reserved[r.UID]; ok && res.For != r.For {
		q.mu.Unlock()
		return nil
	}
	_, known := q.requests[r.UID]
	q.requests[r.UID] = r
	delete(q.reserved, r.UID)
	q.claimLocked(r)
	q.mu.Unlock()
	if !known {
		q.queue.Add(r.UID)
	}
	return nil
}

// Forget drops the pod's eviction the drains asked for: a later attempt
// will not happen. Another consumer's is left. Its latest refusal is kept
// (it still explains the pod, and says when trying again is worth it)
// until ForgetNode.
func (q *Queue) Forget(uid types.UID) {
	q.mu.Lock()
	if r, ok := q.requests[uid]; ok && r.For != ForDrains {
		q.mu.Unlock()
		return
	}
	q.dropRequestLocked(uid)
	q.mu.Unlock()
	q.queue.Forget(uid)
}

// ForgetNode drops every queued eviction the drains asked for of the node's
// pods and what the queue remembers of them: evictions, reservations (those
// for the pods they asked for with EvictionRequests too) and refusals (the
// drain ended, failed, was held or cancelled). Another
// consumer's evictions on the node (Request.For) are that consumer's to
// forget. It returns how many queued evictions it dropped.
func (q *Queue) ForgetNode(node string) int {
	q.mu.Lock()
	var uids []types.UID
	for uid, r := range q.requests {
		if r.Node == node && r.For == ForDrains {
			uids = append(uids, uid)
			delete(q.requests, uid)
			q.unclaimLocked(uid, r.PDBs)
		}
	}
	for uid, e := range q.evicted {
		if e.node == node && e.req.For == ForDrains {
			delete(q.evicted, uid)
			q.unclaimLocked(uid, e.req.PDBs)
		}
	}
	for uid, r := range q.reserved {
		if r.Node == node && (r.For == ForDrains || r.For == ForEvictionRequests) { // the coordinator never reserves
			delete(q.reserved, uid)
			q.unclaimLocked(uid, r.PDBs)
		}
	}
	for uid, ref := range q.refusals {
		if ref.node == node && ref.forConsumer == ForDrains {
			delete(q.refusals, uid)
		}
	}
	q.sweepLocked()
	if q.perNode[node] == 0 {
		delete(q.perNode, node)
	}
	q.mu.Unlock()
	for _, uid := range uids {
		q.queue.Forget(uid)
	}
	return len(uids)
}

// Remembered is how many things the queue keeps of the node's pods:
// queued or in flight, evicted lately, reserved, refused.
func (q *Queue) Remembered(node string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return onNode(q.requests, node, func(r Request) string { return r.Node }) +
		onNode(q.evicted, node, func(e evictedPod) string { return e.node }) +
		onNode(q.reserved, node, func(r Request) string { return r.Node }) +
		onNode(q.refusals, node, func(r Refusal) string { return r.node })
}

// onNode is how many of the pods in m are on the node.
func onNode[V any](m map[types.UID]V, node string, nodeOf func(V) string) int {
	n := 0
	for _, v := range m {
		if nodeOf(v) == node {
			n++
		}
	}
	return n
}

// Pending reports whether the pod is queued or in flight.
func (q *Queue) Pending(uid types.UID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.requests[uid]
	return ok
}

// PodRequest builds the Request for a pod.
func PodRequest(p *corev1.Pod, grace *int64, perNode int) Request {
	return Request{Pod: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, UID: p.UID, Node: p.Spec.NodeName,
		GracePeriodSeconds: grace, PerNode: perNode}
}

// Refusal is the latest refusal of a pod's eviction, or of its dry run.
type Refusal struct {
	// Since is when the API server first answered this way.
	Since   time.Time
	Result  Result
	Code    int32
	Message string
	// RetriedAt is the state of the pod's PDBs when the caller last asked
	// for it to be tried at once (RetryNow); Retrying is set from then
	// until that try's answer.
	RetriedAt string
	Retrying  bool
	// MultiplePDBs: the refusal is the Eviction API's answer to a pod that
	// more than one PodDisruptionBudget selects, a 500 (only the caller
	// knows the pod's PDBs; the message is never read).
	MultiplePDBs bool

	node, forConsumer string
}

// PodState is what the queue knows of one pod's eviction.
type PodState struct {
	// Pending: queued or in flight. Evicted: evicted lately. Reserved:
	// taken out of service for its eviction, not queued yet.
	Pending, Evicted, Reserved bool
	// Refusal is the latest refusal of its eviction, if Refused.
	Refusal Refusal
	Refused bool
}

// PDBRefused says whether the pod's eviction was refused for a PDB and is
// not being tried again at once.
func (s PodState) PDBRefused() bool {
	return s.Refused && s.Refusal.Result == PDBBlocked && !s.Refusal.Retrying
}

// WaitsOnBudget says whether the pod's eviction waits for a change of its
// PDBs: not queued (for want of budget), or refused for a PDB and not
// being tried again. A queued eviction's answer, and an evicted pod's
// termination, come on their own.
func (s PodState) WaitsOnBudget() bool {
	if s.Evicted || s.Reserved {
		return false
	}
	return !s.Pending || s.PDBRefused()
}

// State is what the queue knows of the pod's eviction.
func (q *Queue) State(uid types.UID) PodState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stateLocked(uid)
}

func (q *Queue) stateLocked(uid types.UID) PodState {
	_, pending := q.requests[uid]
	_, evicted := q.evicted[uid]
	_, reserved := q.reserved[uid]
	ref, refused := q.refusals[uid]
	return PodState{Pending: pending, Evicted: evicted, Reserved: reserved, Refusal: ref, Refused: refused}
}

// Reserve counts the pod's eviction against its PDBs' budgets without
// queuing it: the pod was taken out of service for it (endpoint-aware
// eviction), which the PDBs count as a disruption too, or a drain asked for
// it with an EvictionRequest (For ForEvictionRequests: it counts while the
// pod runs, Budget). A pod queued or evicted is not reserved. Add queues it
// later; Unreserve drops the reservation (the pod is back in service).
func (q *Queue) Reserve(r Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, pending := q.requests[r.UID]; pending {
		return
	}
	if _, evicted := q.evicted[r.UID]; evicted {
		return // its eviction counts as evicted until the pod is seen leaving
	}
	q.reserved[r.UID] = r
	q.claimLocked(r)
}

// Unreserve drops the pod's reservation, if it has one.
func (q *Queue) Unreserve(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.reserved, uid)
}

// RetryNow drops the pod's backoff and queues it at once, for when what
// refused it (a PDB allowing no disruption, a pod more than one PDB
// selected) has changed; pdbState is the state of its PDBs now
// (Refusal.RetriedAt).
func (q *Queue) RetryNow(uid types.UID, pdbState string) {
	q.mu.Lock()
	r, ok := q.requests[uid]
	if ok {
		if ref, refused := q.refusals[uid]; refused {
			ref.RetriedAt, ref.Retrying = pdbState, true
			q.refusals[uid] = ref
		}
		q.claimLocked(r)
	}
	q.mu.Unlock()
	if ok {
		q.queue.Forget(uid)
		q.queue.Add(uid)
	}
}

// claimLocked indexes the request by its PDBs. q.mu is held.
func (q *Queue) claimLocked(r Request) {
	for _, k := range r.PDBs {
		if q.byPDB[k] == nil {
			q.byPDB[k] = map[types.UID]bool{}
		}
		q.byPDB[k][r.UID] = true
	}
}

// unclaimLocked drops the pod from the index of each of its PDBs. q.mu is
// held.
func (q *Queue) unclaimLocked(uid types.UID, pdbs []string) {
	for _, k := range pdbs {
		delete(q.byPDB[k], uid)
		if len(q.byPDB[k]) == 0 {
			delete(q.byPDB, k)
		}
	}
}

// dropRequestLocked forgets the pod's queued eviction, and its claim
// unless it is reserved or evicted. q.mu is held.
func (q *Queue) dropRequestLocked(uid types.UID) {
	r, ok := q.requests[uid]
	if !ok {
		return
	}
	delete(q.requests, uid)
	_, evicted := q.evicted[uid]
	if _, reserved := q.reserved[uid]; !reserved && !evicted {
		q.unclaimLocked(uid, r.PDBs)
	}
}

// sweepLocked drops the claims of pods the queue no longer knows. q.mu is
// held.
func (q *Queue) sweepLocked() {
	for k, uids := range q.byPDB {
		for uid := range uids {
			if _, known := q.claimOfLocked(uid); !known {
				delete(uids, uid)
			}
		}
		if len(uids) == 0 {
			delete(q.byPDB, k)
		}
	}
}

// recordLocked keeps the answer to the pod's eviction: a refusal replaces
// the previous one (keeping its Since and RetriedAt when it is the same
// refusal); evicted, gone or held drop it. q.mu is held.
func (q *Queue) recordLocked(o Outcome) {
	switch o.Result {
	case Evicted, Gone, Held:
		delete(q.refusals, o.UID)
		return
	}
	ref, refused := q.refusals[o.UID]
	if !refused || ref.Result != o.Result || ref.Code != o.Code {
		ref = Refusal{Since: o.At, Result: o.Result, Code: o.Code, node: o.Node, forConsumer: o.For,
			MultiplePDBs: o.Result == Failed && o.Code == http.StatusInternalServerError}
	}
	ref.Message, ref.Retrying = o.Message, false
	q.refusals[o.UID] = ref
}

// claim is what Budget needs of a claiming pod, read under the lock.
type claim struct {
	req               Request
	reserved, pending bool
	evicted           bool
	pdbRefused        bool
}

// underway says whether the pod's eviction counts against its PDBs'
// budget: reserved for it (a pod out of service; a pod asked for with an
// EvictionRequest while it still runs), evicted while the cache
// still shows the pod not terminating (running: the PDB's status does not
// count it yet), or queued and not waiting on a PDB refusal.
func (c claim) underway(running func(types.UID, types.NamespacedName) bool) bool {
	switch {
	case c.reserved && c.req.For == ForEvictionRequests:
		// A drain asked for the pod with an EvictionRequest: whoever
		// evicts it (this queue's coordinator, another, a responder), the
		// budget is taken until the pod stops running.
		return running(c.req.UID, c.req.Pod)
	case c.reserved:
		return true
	case c.evicted:
		return running(c.req.UID, c.req.Pod)
	}
	return c.pending && !c.pdbRefused
}

// Budget is how many more evictions each PodDisruptionBudget (by
// namespace/name, as pdbs show them) lets through now: its
// status.disruptionsAllowed, less the evictions underway (of every drain:
// drains of many nodes share PDBs) that its status does not count yet
// (CountedBy). Only the given PDBs are looked at: a pass costs its node's
// PDBs, not every eviction of every drain. Pods whose evictions are no
// longer underway stop being looked at, until they are queued, reserved or
// tried again. running says whether an evicted pod is still not
// terminating in the caller's cache; it is called without the queue's
// lock.
func (q *Queue) Budget(pdbs map[string]*policyv1.PodDisruptionBudget, running func(types.UID, types.NamespacedName) bool) map[string]int {
	left := make(map[string]int, len(pdbs))
	for k, p := range pdbs {
		left[k] = int(p.Status.DisruptionsAllowed)
	}
	var over []claim
	for _, c := range q.claimsOf(left) {
		if !c.underway(running) {
			over = append(over, c)
			continue
		}
		for i, p := range c.req.PDBs {
			if _, needed := left[p]; needed && !CountedBy(pdbs[p], c.req.Pod.Name, markOf(c.req, i)) {
				left[p]--
			}
		}
	}
	if len(over) > 0 {
		q.mu.Lock()
		for _, c := range over {
			if res, ok := q.reserved[c.req.UID]; ok && res.For == ForEvictionRequests {
				delete(q.reserved, c.req.UID) // its pod stopped running: the reservation is over
			}
			// Only if nothing made it underway meanwhile.
			now := q.stateLocked(c.req.UID)
			if !now.Reserved && (!now.Pending || now.PDBRefused()) {
				q.unclaimLocked(c.req.UID, c.req.PDBs)
			}
		}
		q.mu.Unlock()
	}
	return left
}

// BudgetBeside is Budget for the eviction of the pod with uid: what its
// PDBs let through beside every other eviction underway, its own claim (a
// drain's reservation of it, its own queued eviction) left out. The
// EvictionRequest coordinator asks it before it queues a pod's eviction,
// so that it never spends what the drains took for their pods.
func (q *Queue) BudgetBeside(uid types.UID, pdbs map[string]*policyv1.PodDisruptionBudget, running func(types.UID, types.NamespacedName) bool) map[string]int {
	left := q.Budget(pdbs, running)
	q.mu.Lock()
	c, ok := q.claimOfLocked(uid)
	q.mu.Unlock()
	if !ok || !c.underway(running) {
		return left
	}
	for i, p := range c.req.PDBs {
		if _, needed := left[p]; needed && !CountedBy(pdbs[p], c.req.Pod.Name, markOf(c.req, i)) {
			left[p]++
		}
	}
	return left
}

// claimsOf are the claims of the pods claiming one of the PDBs, each once.
func (q *Queue) claimsOf(pdbs map[string]int) []claim {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []claim
	seen := map[types.UID]bool{}
	for k := range pdbs {
		for uid := range q.byPDB[k] {
			c, ok := q.claimOfLocked(uid)
			if !ok { // the queue forgot the pod
				q.unclaimLocked(uid, []string{k})
				continue
			}
			if !seen[uid] {
				seen[uid] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// claimOfLocked is the pod's claim as the queue knows it now; false when
// the queue no longer knows the pod. q.mu is held.
func (q *Queue) claimOfLocked(uid types.UID) (claim, bool) {
	st := q.stateLocked(uid)
	c := claim{reserved: st.Reserved, pending: st.Pending, evicted: st.Evicted, pdbRefused: st.PDBRefused()}
	switch {
	case st.Pending:
		c.req = q.requests[uid]
	case st.Reserved:
		c.req = q.reserved[uid]
	case st.Evicted:
		c.req = q.evicted[uid].req
	default:
		return claim{}, false
	}
	return c, true
}

// Claim is the request whose eviction counts against its PDBs now
// (queued, reserved, or evicted and still indexed), if any.
func (q *Queue) Claim(uid types.UID) (Request, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.claimOfLocked(uid)
	if !ok {
		return Request{}, false
	}
	for _, k := range c.req.PDBs {
		if q.byPDB[k][uid] {
			return c.req, true
		}
	}
	return Request{}, false
}

// markOf is the request's mark for its i-th PDB; zero if it has none.
func markOf(r Request, i int) metav1.Time {
	if i < len(r.Marks) {
		return r.Marks[i]
	}
	return metav1.Time{}
}

// MarksOf are the pod's entries in the status.disruptedPods of each of
// the PDBs (by namespace/name, as pdbs show them), for Request.Marks.
func MarksOf(pod string, keys []string, pdbs map[string]*policyv1.PodDisruptionBudget) []metav1.Time {
	marks := make([]metav1.Time, len(keys))
	for i, k := range keys {
		if p := pdbs[k]; p != nil {
			marks[i] = p.Status.DisruptedPods[pod]
		}
	}
	return marks
}

// CountedBy says whether the PDB's status already counts the eviction of
// the pod asked with mark: the Eviction API takes one from
// disruptionsAllowed and records the pod in disruptedPods in the same
// write, and the disruption controller keeps the pod out of the healthy
// count from then on. An entry newer than the one the PDB had when the
// eviction was asked is that write: a budget that also counted the
// eviction would count it twice, and hold a pod back for a disruption the
// PDB allows. A nil PDB counts nothing.
func CountedBy(pdb *policyv1.PodDisruptionBudget, pod string, mark metav1.Time) bool {
	if pdb == nil {
		return false
	}
	at, ok := pdb.Status.DisruptedPods[pod]
	return ok && !at.Equal(&mark)
}
