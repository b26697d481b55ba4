package nodedrain

import (
	"context"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/internal/drain"
)

// plan is the planner's decisions for the node's pods, made once per pass
// (the evacuate and evict stages both need them), under the policy's rules
// and the node's readiness: terminating pods on a node that has not been
// Ready for timeouts.unreachablePods are no longer waited on.
func (r *Reconciler) plan(ctx context.Context, s *scope) (drain.Plan, error) {
	if s.plan != nil {
		return *s.plan, nil
	}
	pods, err := r.podsAsDrained(ctx, s)
	if err != nil {
		return drain.Plan{}, err
	}
	if s.honoured, err = r.honouredNamespaces(ctx, s, pods); err != nil {
		return drain.Plan{}, err
	}
	plan := drain.New(pods, &r.guards, s.policy.Rules.ForNode(s.node), s.now)
	s.plan = &plan
	return plan, nil
}

// evict queues the evictions of the pods whose next step is Evict, within
// their PDBs' budgets, and records what it found of every pod of the plan
// (status.go writes the counts and blockers). It waits until no pod that
// must leave is left.
func (r *Reconciler) evict(ctx context.Context, s *scope) (reconcile.Result, error) {
	if err := r.queueEvictions(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	plan := *s.plan // the evacuate stage planned the pods
	found := s.podsFound(plan)
	s.found.evicting = found
	if s.replacing > 0 && found.completed {
		return reconcile.Result{RequeueAfter: min(time.Second, max(s.recheck, 100*time.Millisecond))}, nil
	}
	if !found.completed {
		s.found.podsLeft, s.found.podsHeld = true, s.evac.holds.Any()
		after := min(s.timeLeft, s.evac.recheck)
		if s.recheck > 0 {
			after = min(after, s.recheck)
		}
		if !plan.Recheck.IsZero() { // a pod stops being waited on (timeouts.unreachablePods)
			after = min(after, max(plan.Recheck.Sub(s.now), time.Second))
		}
		return reconcile.Result{RequeueAfter: after}, nil
	}
	return reconcile.Result{}, nil
}

// queueEvictions queues the evictions of the pods whose step is Evict
// within their PDBs' budgets, and of the endpoint-aware pods whose
// endpoints settled (their reservations hold their budgets), and records
// which PDBs the drain waits on (with those the requestEvictions stage
// found):
// those of its pods whose eviction (or taking out of service) waits for
// budget. Drains run their passes concurrently and share PDBs: one pass at
// a time computes the budgets and queues what they let through.
func (r *Reconciler) queueEvictions(ctx context.Context, s *scope) error {
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	budget := r.pdbBudgets(ctx, *s.plan)
	waiting := s.requestWaits // the PDBs the pods asked for with EvictionRequests wait on
	for _, p := range s.steps {
		switch v, req, state := budget.admit(s, p); v {
		case queueIt:
			if err := r.Evictions.Add(req); err != nil {
				return err
			}
		case retryNow:
			r.Evictions.RetryNow(p.Pod.UID, state)
		}
		if towardEviction := p.step == drain.StepEvict || p.step == drain.StepOutOfService; towardEviction && len(p.PDBs) > 0 &&
			r.Evictions.State(p.Pod.UID).WaitsOnBudget() {
			waiting = append(waiting, p.PDBs...)
		}
	}
	slices.Sort(waiting)
	if r.waiters.wait(s.drain.Name, slices.Compact(waiting), s.since) {
		r.wake(s.drain.Name) // a PDB it waits on changed during the pass
	}
	return nil
}
