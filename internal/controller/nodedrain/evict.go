package nodedrain

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/serving"
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

// evict queues the evictions of the pods the evacuate stage planned, and
// reports progress and blockers. It waits until no pod that must leave is
// left.
func (r *Reconciler) evict(ctx context.Context, s *scope) (reconcile.Result, error) {
	plan := *s.plan // the evacuate stage planned the pods
	if err := r.queueEvictions(ctx, s, plan); err != nil {
		return reconcile.Result{}, err
	}
	r.report(s, plan)
	if s.replacing > 0 && plan.Completed() {
		return reconcile.Result{RequeueAfter: min(time.Second, max(s.recheck, 100*time.Millisecond))}, nil
	}
	if !plan.Completed() {
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

// queueEvictions carries out each pod's next step (drain.Next, which
// `vacate plan` asks too) within the PDBs' budgets. Drains run their passes
// concurrently and share PDBs: one pass at a time computes the budgets and
// queues what they let through.
func (r *Reconciler) queueEvictions(ctx context.Context, s *scope, plan drain.Plan) error {
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	budget := r.pdbBudgets(ctx, plan)
	var waiting []string
	for _, d := range plan.Decisions {
		if d.Action != drain.Evict {
			continue // the planner's Stay, Wait and Blocked: nothing to do
		}
		queued, err := r.takeStep(ctx, s, d, plan, budget)
		if err != nil {
			return err
		}
		if queued && r.ledger.waitsOnBudget(d, r.Evictions) {
			waiting = append(waiting, d.PDBs...)
		}
	}
	slices.Sort(waiting)
	if r.waiters.wait(s.drain.Name, slices.Compact(waiting), s.since) {
		r.wake(s.drain.Name) // a PDB it waits on changed during the pass
	}
	return nil
}

// takeStep reads what the pass knows of a pod the planner evicts, asks
// drain.Next for its next step, and takes it. It reports whether the step
// was toward the pod's eviction (out of service, or queued), which waits
// on its PDBs' budget.
func (r *Reconciler) takeStep(ctx context.Context, s *scope, d drain.Decision, plan drain.Plan, budget pdbBudget) (bool, error) {
	f, sf, err := r.podFacts(ctx, s, d, plan)
	if err != nil {
		return false, err
	}
	step := drain.Next(d, f)
	if step == drain.StepSurge {
		wait, err := r.surge(ctx, s, d, sf)
		if err != nil || wait {
			return false, err
		}
		f.SurgeServing = true // a replacement found around the cache serves
		step = drain.Next(d, f)
	}
	if sf.rep != nil && sf.serves {
		s.surgeReady(d, sf.rep)
	}
	switch step {
	case drain.StepHeld:
		// Its evacuation is not Completed. A pod this drain took out of
		// service meanwhile goes back in service: a hold has no bound.
		b, _ := s.evac.holds.Of(d.Pod)
		return false, r.backInServiceWhileHeld(ctx, s, d, b)
	case drain.StepOutOfService:
		return true, r.queueGated(ctx, s, d, budget)
	case drain.StepEvict:
		return true, r.queueEviction(s, d, budget)
	}
	return false, nil
}

// podFacts are what the pass knows of a pod the planner evicts, for
// drain.Next, and what it read of its surge. It changes nothing. A held
// pod's surge is not read: it waits for its evacuation first.
func (r *Reconciler) podFacts(ctx context.Context, s *scope, d drain.Decision, plan drain.Plan) (drain.PodFacts, surgeFacts, error) {
	_, held := s.evac.holds.Of(d.Pod)
	f := drain.PodFacts{Held: held}
	if held {
		return f, surgeFacts{}, nil
	}
	sf, err := r.surgeFactsOf(ctx, s, d)
	if err != nil {
		return f, sf, err
	}
	f.Surge, f.SurgeServing = sf.waits(), sf.rep != nil && sf.serves
	_, out := serving.OutOfService(d.Pod)
	_, known := r.ledger.gate(d.Pod.UID)
	f.Gated, f.OutOfService, f.GateWouldStick = serving.Gated(d.Pod), out || known, drain.GateWouldStick(d, plan.PDBs)
	return f, sf, nil
}

// report writes counts, blockers and the PodsEvicted and Blocked conditions.
func (r *Reconciler) report(s *scope, plan drain.Plan) {
	st := &s.drain.Status
	remaining := int32(plan.Remaining())
	// Pods that arrive during the drain add to the total; evicted never
	// goes down.
	st.Total = max(st.Total, remaining+st.Evicted)
	st.Remaining = remaining
	st.Evicted = st.Total - remaining
	st.Progress = fmt.Sprintf("%d/%d", st.Evicted, st.Total)

	previous := map[string]metav1.Time{}
	for _, b := range st.Blockers {
		previous[b.Pod+"|"+b.Reason] = b.Since
	}
	var blockers []v1alpha1.Blocker
	for _, d := range plan.Decisions {
		b, ok := s.evac.holds.Of(d.Pod)
		if !ok {
			b, ok = s.gated[d.Pod.UID]
		}
		if !ok {
			b, ok = s.surging[d.Pod.UID]
		}
		if !ok {
			b, ok = r.blockerFor(d, s.now)
		}
		if !ok {
			continue
		}
		if since, ok := previous[b.Pod+"|"+b.Reason]; ok {
			b.Since = since
		} else if _, refused := r.ledger.refusal(d.Pod.UID); refused && refusedByAPI(b.Reason) {
			// Only a refusal the API server answered: a pod the plan holds
			// back because its PDB allows no disruption now (most pods of a
			// drain, at some moment) is a blocker, not an event.
			nd, pod, msg := s.drain, d.Pod, fmt.Sprintf("eviction of %s refused: %s", b.Pod, b.Detail)
			s.afterWrite(func() {
				r.Events.Eventf(nd, pod, corev1.EventTypeWarning, v1alpha1.EventEvictionBlocked, "Evict", "%s", msg)
			})
		}
		blockers = append(blockers, b)
	}
	sort.Slice(blockers, func(i, j int) bool { return blockers[i].Pod < blockers[j].Pod })
	st.Blocked = int32(len(blockers))
	if len(blockers) > v1alpha1.MaxBlockers {
		blockers = blockers[:v1alpha1.MaxBlockers]
	}
	st.Blockers, st.BlockersOmitted = blockers, st.Blocked-int32(len(blockers))
	reasons := make([]string, 0, len(blockers))
	for _, b := range blockers {
		reasons = append(reasons, b.Reason)
	}
	r.blocked.set(s.drain.Name, reasons...)

	found := &podCounts{completed: plan.Completed(), summary: plan.ConditionMessage(), blocked: st.Blocked, blockers: blockers}
	if d := st.Deadline; d != nil && !s.policy.ForceDelete && !s.now.Before(d.Time.Time) {
		found.pastDeadline = d
	}
	s.found.evicting = found
}

// refusedByAPI reports whether a blocker reason is an eviction the API
// server refused (a PDB's 429, throttling, 403, 422, 500...): each new one
// is also a Warning event on the drain.
func refusedByAPI(reason string) bool {
	switch reason {
	case v1alpha1.BlockerPDB, v1alpha1.BlockerThrottled, v1alpha1.BlockerForbidden, v1alpha1.BlockerMultiplePDBs, v1alpha1.BlockerInvalid, v1alpha1.BlockerFailed:
		return true
	}
	return false
}
