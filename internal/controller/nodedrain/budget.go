package nodedrain

import (
	"context"
	"fmt"
	"strings"

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
// with its PDBs and their marks as the plan saw them
// (eviction.Request.Marks).
func (b pdbBudget) request(s *scope, d drain.Decision) eviction.Request {
	req := eviction.PodRequest(d.Pod, s.policy.Grace, s.policy.PerNode)
	req.PDBs, req.Marks = d.PDBs, eviction.MarksOf(d.Pod.Name, d.PDBs, b.pdbs)
	return req
}

// verdict is what a pass does with a pod on its way to its eviction.
type verdict int

const (
	// waitBudget: its step is not Evict, its eviction is underway, or its
	// PDBs' budget has nothing left (the PDB's next change wakes the
	// drain).
	waitBudget verdict = iota
	// queueIt: its eviction is queued.
	queueIt
	// retryNow: what refused its eviction has changed (its PDB's status
	// allows a disruption, or only one PDB selects it now): it is tried
	// again at once.
	retryNow
)

// admit says what the pass does with a pod whose step is Evict, or an
// endpoint-aware pod ready for its eviction (its reservation holds its
// place in the budgets), within its PDBs' budget (taking one of each when
// it goes on): the eviction to queue, or the PDBs' state it is tried again
// with (Refusal.RetriedAt). Other pods of a PDB wait.
func (b pdbBudget) admit(s *scope, p podStep) (verdict, eviction.Request, string) {
	switch {
	case p.ready:
	case p.step != drain.StepEvict, p.rec.Evicted: // evicted: the cache does not show it terminating yet
		return waitBudget, eviction.Request{}, ""
	case !p.rec.Pending:
		if !b.take(p.PDBs) {
			return waitBudget, eviction.Request{}, ""
		}
	default:
		state := b.fingerprint(p.PDBs)
		if p.rec.Refused && resolvedBy(p.rec.Refusal, p.Decision, state) && b.take(p.PDBs) {
			return retryNow, eviction.Request{}, state
		}
		return waitBudget, eviction.Request{}, ""
	}
	return queueIt, b.request(s, p.Decision), ""
}

// resolvedBy says whether what refused the pod's eviction has since
// changed in a way the plan shows, so the eviction is worth trying at once
// rather than at the end of its backoff: a PodDisruptionBudget that allows
// a disruption now, or a pod that more than one PDB no longer selects. A
// pod already tried at once is not tried at once again until its PDBs'
// status (pdbState) changes, nor while that try is unanswered. Other
// refusals (throttling, denials, failures) wait for their backoff.
func resolvedBy(ref eviction.Refusal, d drain.Decision, pdbState string) bool {
	switch {
	case ref.Retrying, ref.RetriedAt != "" && ref.RetriedAt == pdbState:
		return false
	case ref.Result == eviction.PDBBlocked:
		return !d.PDBBlocked
	case ref.MultiplePDBs:
		return len(d.PDBs) <= 1
	}
	return false
}
