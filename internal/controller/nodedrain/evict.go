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

// evict takes the next step of each pod the evacuate stage planned to
// evict, and records what it found of every pod of the plan (status.go
// writes the counts and blockers). It waits until no pod that must leave
// is left.
func (r *Reconciler) evict(ctx context.Context, s *scope) (reconcile.Result, error) {
	plan := *s.plan // the evacuate stage planned the pods
	found := podsFound(s, plan)
	if err := r.takeSteps(ctx, s, plan, found); err != nil {
		return reconcile.Result{}, err
	}
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

// takeSteps carries out the next step of each pod the planner evicts
// (drain.Next, which `vacate plan` asks too) within the PDBs' budgets, and
// records what holds each pod of the plan up. Drains run their passes
// concurrently and share PDBs: one pass at a time computes the budgets and
// queues what they let through.
func (r *Reconciler) takeSteps(ctx context.Context, s *scope, plan drain.Plan, found *podCounts) error {
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	budget := r.pdbBudgets(ctx, plan)
	var waiting []string
	for _, d := range plan.Decisions {
		var rec podRecord
		if d.Action == drain.Evict {
			rec = r.recordOf(d.Pod.UID)
			queued, err := r.takeStep(ctx, s, d, rec, plan, budget)
			if err != nil {
				return err
			}
			if queued && len(d.PDBs) > 0 && r.Evictions.State(d.Pod.UID).WaitsOnBudget() {
				waiting = append(waiting, d.PDBs...)
			}
		}
		if b, ok := s.blockerOf(d, rec); ok {
			found.blockers = append(found.blockers, b)
		}
	}
	s.found.evicting = found
	slices.Sort(waiting)
	if r.waiters.wait(s.drain.Name, slices.Compact(waiting), s.since) {
		r.wake(s.drain.Name) // a PDB it waits on changed during the pass
	}
	return nil
}

// podsFound are the plan's counts, before its blockers are found.
func podsFound(s *scope, plan drain.Plan) *podCounts {
	found := &podCounts{completed: plan.Completed(), remaining: int32(plan.Remaining()), summary: plan.ConditionMessage()}
	if d := s.drain.Status.Deadline; d != nil && !s.policy.ForceDelete && !s.now.Before(d.Time.Time) {
		found.pastDeadline = d
	}
	return found
}

// takeStep reads what the pass knows of a pod the planner evicts (is it
// held, does it wait for its surge, is it out of service), asks drain.Next
// for its next step, and takes it. It reports whether the step was toward
// the pod's eviction (out of service, or queued), which waits on its PDBs'
// budget. A held pod's surge is not read: it waits for its evacuation
// first.
func (r *Reconciler) takeStep(ctx context.Context, s *scope, d drain.Decision, rec podRecord, plan drain.Plan, budget pdbBudget) (bool, error) {
	b, held := s.evac.holds.Of(d.Pod)
	var sf surgeFacts
	if !held {
		var err error
		if sf, err = r.surgeFactsOf(ctx, s, d); err != nil {
			return false, err
		}
	}
	f := drain.PodFacts{Held: held, Surge: sf.waits(), SurgeServing: sf.rep != nil && sf.serves}.WithGate(d, plan.PDBs, rec.gated)
	switch drain.Next(d, f) {
	case drain.StepHeld:
		// Its evacuation is not Completed. A pod this drain took out of
		// service meanwhile goes back in service: a hold has no bound.
		return false, r.backInServiceWhileHeld(ctx, s, d, b)
	case drain.StepSurge:
		return false, r.surge(ctx, s, d, sf)
	case drain.StepOutOfService:
		return true, r.queueGated(ctx, s, d, rec, budget)
	case drain.StepEvict:
		return true, r.queueEviction(s, d, rec, budget)
	}
	return false, nil
}
