package nodedrain

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/controller/cordon"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
)

// setCondition sets a condition of the drain, its message capped at
// v1alpha1.MaxMessage runes.
func (s *scope) setCondition(t string, status metav1.ConditionStatus, reason, msg string) {
	condition.Set(&s.drain.Status.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.drain.Generation,
		LastTransitionTime: metav1.NewTime(s.now),
	})
}

// loadNode finds the node and its policy; without either, or with more than
// one policy that selects the node, the drain waits.
func (r *Reconciler) loadNode(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("node %s does not exist; the drain starts if it appears", nd.Spec.NodeName)
		r.hold(s, v1alpha1.ReasonNodeNotFound, msg)
		s.setCondition(v1alpha1.ConditionCordoned, metav1.ConditionFalse, v1alpha1.ReasonNodeNotFound, msg)
		return reconcile.Result{RequeueAfter: requeue.Resync}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	s.node = node
	r.warnNoExecute(s, node)
	if nd.Status.NodeUID == "" {
		nd.Status.NodeUID = string(node.UID)
	} else if nd.Status.NodeUID != string(node.UID) {
		return r.nodeReplaced(ctx, s)
	}
	p, err := policy.Resolve(ctx, r.Client, nd.Spec.PolicyName, node)
	switch {
	case policy.IsNotFound(err):
		r.hold(s, v1alpha1.ReasonPolicyNotFound, err.Error())
		return reconcile.Result{RequeueAfter: requeue.Resync}, nil
	case policy.IsAmbiguous(err):
		r.hold(s, v1alpha1.ReasonAmbiguousPolicy, err.Error())
		return reconcile.Result{RequeueAfter: requeue.Resync}, nil
	case err != nil:
		return reconcile.Result{}, err
	}
	s.policy = p
	return reconcile.Result{}, nil
}

// nodeReplaced starts the drain over on a node that was deleted and created
// again under the same name: it is another machine. Nothing recorded for the
// old one applies to it: the admission is given up (hold), the Evacuations of
// this drain are deleted without a cancel (their node is gone, and what was
// moved off it stays moved), HTTP hook conversations and counts are dropped.
// The next pass records the new node's UID and admits the drain like a new one.
func (r *Reconciler) nodeReplaced(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd, node := s.drain, s.node
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Evacuations: %w", err)
	}
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName != nd.Spec.NodeName || ev.Spec.DrainUID != string(nd.UID) ||
			(!ev.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel)) {
			continue
		}
		s.log.Info("deleting an Evacuation of the node this drain's node replaced", "evacuation", klogRef(ev.Name))
		if err := r.letGo(ctx, ev, false); err != nil {
			return reconcile.Result{}, fmt.Errorf("deleting Evacuation %s of the replaced node: %w", ev.Name, err)
		}
	}
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	msg := fmt.Sprintf("node %s was deleted and created again (uid %s, was %s): it is another node; the drain starts over on it",
		node.Name, node.UID, nd.Status.NodeUID)
	r.hold(s, v1alpha1.ReasonNodeReplaced, msg)
	st := &nd.Status
	st.NodeUID = string(node.UID)
	st.Hooks, st.Total, st.Evicted, st.Remaining, st.Progress, st.CompletionTime = nil, 0, 0, 0, "", nil
	st.HooksOmitted, st.HookCalls, st.RunID = 0, nil, "" // a new run on the new node
	for _, t := range []string{v1alpha1.ConditionCordoned, v1alpha1.ConditionEvacuated, v1alpha1.ConditionPodsEvicted, v1alpha1.ConditionDrained} {
		meta.RemoveStatusCondition(&st.Conditions, t)
	}
	s.afterWrite(func() {
		r.Events.Eventf(nd, node, corev1.EventTypeWarning, v1alpha1.EventNodeReplaced, "Drain", "%s", msg)
	})
	return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
}

// cordon marks the node unschedulable, recording that vacate did it; a node
// someone else cordoned is left as it is and never uncordoned by vacate.
// The admission controller cordoned a drain of a batch before admitting it;
// this stage cordons what nobody did (a drain admitted by an older version,
// a node someone uncordoned meanwhile).
func (r *Reconciler) cordon(ctx context.Context, s *scope) (reconcile.Result, error) {
	node, nd := s.node, s.drain
	if reason, msg, cordoned := nd.CordonState(node); cordoned {
		s.setCondition(v1alpha1.ConditionCordoned, metav1.ConditionTrue, reason, msg)
	} else {
		s.log.Info("cordoning node", "node", klogRef(node.Name))
		if _, err := cordon.Cordon(ctx, r.Client, node, nd); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		r.Events.Eventf(nd, node, corev1.EventTypeNormal, v1alpha1.EventCordoned, "Cordon", "cordoned node %s", node.Name)
		s.setCondition(v1alpha1.ConditionCordoned, metav1.ConditionTrue, v1alpha1.ReasonCordoned, v1alpha1.MessageCordoned)
	}
	if s.drain.Status.Phase == "" || s.drain.Status.Phase == v1alpha1.PhasePending {
		s.drain.Status.Phase = v1alpha1.PhaseCordoned
	}
	return reconcile.Result{}, nil
}

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
	pdbs, err := index.PDBs(ctx, r.Client)
	if err != nil {
		return drain.Plan{}, err
	}
	plan := drain.New(pods, pdbs, s.policy.Rules.ForNode(s.node), s.now)
	s.plan, s.pdbs = &plan, pdbs
	return plan, nil
}

// evict plans the node's pods, queues the evictions, and reports progress
// and blockers. It waits until no pod that must leave is left.
func (r *Reconciler) evict(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	plan, err := r.plan(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if reason, why, over := overdue(s); over && !plan.Completed() {
		return r.timeout(ctx, s, plan, reason, why)
	}
	if res, err := r.keepDaemonSetsOff(ctx, s); err != nil || !res.IsZero() {
		return res, err
	}
	if err := r.queueEvictions(ctx, s, plan); err != nil {
		return reconcile.Result{}, err
	}
	r.report(s, plan)
	if !plan.Completed() {
		nd.Status.Phase = v1alpha1.PhaseEvicting
		if len(s.evac.holding) > 0 {
			nd.Status.Phase = v1alpha1.PhaseEvacuating
		}
		after := min(r.waitFor(s), s.evac.recheck)
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

// keepDaemonSetsOff taints the node, before any DaemonSet pod is evicted,
// when the policy evicts DaemonSet pods (pods.daemonSets: Evict): they
// tolerate the cordon, and their DaemonSet would put each back at once.
// Undo removes the taint (its value is this drain's UID).
func (r *Reconciler) keepDaemonSetsOff(ctx context.Context, s *scope) (reconcile.Result, error) {
	if !s.policy.Rules.EvictDaemonSets || cordon.KeepsDaemonSetsOff(s.node, s.drain) {
		return reconcile.Result{}, nil
	}
	changed, err := cordon.KeepDaemonSetsOff(ctx, r.Client, s.node, s.drain)
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if changed {
		s.log.Info("tainted the node so that DaemonSets put no pod back while it drains", "node", klogRef(s.node.Name), "taint", v1alpha1.TaintDaemonSetsOff)
		r.Events.Eventf(s.drain, s.node, corev1.EventTypeNormal, v1alpha1.EventCordoned, "Taint",
			"tainted node %s with %s (NoSchedule) so that DaemonSets put no pod back while it drains (pods.daemonSets: Evict)", s.node.Name, v1alpha1.TaintDaemonSetsOff)
	}
	return reconcile.Result{}, nil
}

// queueEvictions queues the plan's evictions within the PDBs' budgets.
// Drains run their passes concurrently and share PDBs: one pass at a time
// computes the budgets and queues what they let through.
func (r *Reconciler) queueEvictions(ctx context.Context, s *scope, plan drain.Plan) error {
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	budget := r.pdbBudgets(ctx, s.pdbs)
	var waiting []string
	for _, d := range plan.Decisions {
		if d.Action != drain.Evict {
			continue
		}
		if b, held := s.evac.holding[d.Pod.UID]; held {
			// Its evacuation is not Completed. A pod this drain took out of
			// service meanwhile goes back in service: a hold has no bound.
			if err := r.backInServiceWhileHeld(ctx, s, d, b); err != nil {
				return err
			}
			continue
		}
		queue := r.queueEviction
		if r.takesGatedPath(s, d) {
			queue = func(s *scope, d drain.Decision, b pdbBudget) error { return r.queueGated(ctx, s, d, b) }
		}
		if err := queue(s, d, budget); err != nil {
			return err
		}
		if r.waitsOnBudget(d) {
			waiting = append(waiting, d.PDBs...)
		}
	}
	slices.Sort(waiting)
	if r.waiters.wait(s.drain.Name, slices.Compact(waiting), s.since) {
		r.wake(s.drain.Name) // a PDB it waits on changed during the pass
	}
	return nil
}

// waitsOnBudget says whether the pod's eviction, after this pass, waits for
// a change of its PDBs: not queued for want of budget, or refused for a PDB
// and not being tried again. A queued eviction's answer, and an evicted
// pod's termination, wake the drain on their own.
func (r *Reconciler) waitsOnBudget(d drain.Decision) bool {
	uid := d.Pod.UID
	switch {
	case len(d.PDBs) == 0, r.Evictions.Evicted(uid), r.gates.holds(uid):
		return false
	case !r.Evictions.Pending(uid):
		return true
	}
	ref, ok := r.refusals.get(uid)
	return ok && !ref.retrying && ref.result == eviction.PDBBlocked
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
		b, ok := s.evac.holding[d.Pod.UID]
		if !ok {
			b, ok = s.gated[d.Pod.UID]
		}
		if !ok {
			b, ok = r.blockerFor(d, s.now)
		}
		if !ok {
			continue
		}
		if since, ok := previous[b.Pod+"|"+b.Reason]; ok {
			b.Since = since
		} else if _, refused := r.refusals.get(d.Pod.UID); refused && refusedByAPI(b.Reason) {
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

	if plan.Completed() {
		s.setCondition(v1alpha1.ConditionPodsEvicted, metav1.ConditionTrue, v1alpha1.ReasonAllEvicted, plan.ConditionMessage())
	} else {
		s.setCondition(v1alpha1.ConditionPodsEvicted, metav1.ConditionFalse, v1alpha1.ReasonEvicting, plan.ConditionMessage())
	}
	if len(blockers) > 0 {
		msg := blockedMessage(st.Blocked, blockers)
		if d := st.Deadline; d != nil && !s.policy.ForceDelete && !s.now.Before(d.Time.Time) {
			msg = fmt.Sprintf("past the deadline of requester %s (%s): draining on as fast as the pods allow (onTimeout Fail never stops a drain at a deadline); %s",
				d.Requester, d.Time.UTC().Format(time.RFC3339), msg)
		}
		s.setCondition(v1alpha1.ConditionBlocked, metav1.ConditionTrue, v1alpha1.ReasonBlocked, msg)
	} else {
		s.setCondition(v1alpha1.ConditionBlocked, metav1.ConditionFalse, v1alpha1.ReasonNotBlocked, "nothing blocks the drain")
	}
}

func blockedMessage(total int32, blockers []v1alpha1.Blocker) string {
	parts := make([]string, 0, 3)
	for i, b := range blockers {
		if i == 3 {
			break
		}
		parts = append(parts, b.Pod+": "+b.Reason)
	}
	msg := fmt.Sprintf("%d pod(s) blocked: %s", total, strings.Join(parts, "; "))
	if int(total) > len(parts) {
		msg += fmt.Sprintf("; and %d more", int(total)-len(parts))
	}
	return msg
}

// overdue says whether the drain ran out of time: past timeouts.drain, with
// an evacuation past timeouts.evacuation, or, under onTimeout ForceDelete,
// past a requester's deadline (the machine goes away then: what is left is
// deleted). reason and why say which. Under Fail a deadline never ends the
// drain: stopping would leave the pods on a machine that goes, less than
// the drain would do without a deadline; it drains on as fast as its
// PodDisruptionBudgets allow, bounded by timeouts.drain.
func overdue(s *scope) (reason, why string, over bool) {
	if d := s.drain.Status.Deadline; d != nil && s.policy.ForceDelete && !s.now.Before(d.Time.Time) {
		return v1alpha1.ReasonDeadlinePassed, fmt.Sprintf("the drain did not finish by %s, the deadline of requester %s",
			d.Time.UTC().Format(time.RFC3339), d.Requester), true
	}
	if st := s.drain.Status.StartTime; s.policy.DrainTimeout > 0 && st != nil && s.now.Sub(st.Time) >= s.policy.DrainTimeout {
		return v1alpha1.ReasonDrainTimeout, fmt.Sprintf("the drain did not finish within %s (timeouts.drain)", s.policy.DrainTimeout), true
	}
	if len(s.evac.timedOut) > 0 {
		return v1alpha1.ReasonEvacuationTimedOut, "evacuation(s) past timeouts.evacuation: " + strings.Join(s.evac.timedOut, "; "), true
	}
	return "", "", false
}

// waitFor is how long an evicting drain waits for its next pass when no
// event comes: the resync, or the drain timeout or deadline if sooner.
func (r *Reconciler) waitFor(s *scope) time.Duration {
	wait := requeue.Resync
	if s.policy.DrainTimeout > 0 && s.drain.Status.StartTime != nil {
		if left := s.drain.Status.StartTime.Add(s.policy.DrainTimeout).Sub(s.now); left > 0 {
			wait = min(wait, left)
		}
	}
	if d := s.drain.Status.Deadline; d != nil && s.policy.ForceDelete {
		if left := d.Time.Sub(s.now); left > 0 {
			wait = min(wait, left)
		}
	}
	return wait
}

// timeout ends a drain that ran out of time. Under onTimeout: Fail it is
// Failed with the pods in place. Under ForceDelete, only when the policy
// says so, it deletes the pods that must leave, except the ones it never
// deletes: pods an unfinished evacuation or HTTP hook protects (safety
// invariant 3) and pods annotated wait-completed; once nothing more can
// leave, the drain is Drained if nothing was spared, else Failed naming the
// spared pods. Either way it reaches a final phase.
func (r *Reconciler) timeout(ctx context.Context, s *scope, plan drain.Plan, reason, why string) (reconcile.Result, error) {
	r.report(s, plan)
	if s.policy.ForceDelete {
		deleted, leaving, err := r.forceDelete(ctx, s, plan, why)
		if apierrors.IsForbidden(err) {
			// Retrying cannot help: the right is missing (or an admission
			// policy refuses). End the drain saying what to bind.
			r.fail(s, v1alpha1.ReasonForceDeleteForbidden, fmt.Sprintf("%s; onTimeout ForceDelete, but %v; bind the ClusterRole "+
				"vacate-controller-force-delete to the controller ('vacate manifests force-delete | kubectl apply -f -')", why, err))
			return reconcile.Result{}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if deleted+leaving > 0 {
			s.setCondition(v1alpha1.ConditionBlocked, metav1.ConditionTrue, reason,
				fmt.Sprintf("%s; remaining pods deleted (policy onTimeout: ForceDelete)", why))
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		spared := sparedPods(s, plan)
		if len(spared) == 0 && len(s.evac.pending) == 0 {
			return reconcile.Result{}, nil // everything left: finalize
		}
		why += "; onTimeout ForceDelete deleted every pod it may"
		if len(spared) > 0 {
			why += ", and will not delete " + listSome(spared, 5)
		}
		if len(s.evac.pending) > 0 {
			why += "; unfinished: " + strings.Join(s.evac.pending, "; ")
		}
	} else {
		why += ": " + plan.ConditionMessage()
	}
	r.fail(s, reason, why)
	return reconcile.Result{}, nil
}

// fail ends the drain Failed, with the pods that are left in place.
func (r *Reconciler) fail(s *scope, reason, msg string) {
	nd := s.drain
	r.forgetNode(nd.Spec.NodeName)
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	nd.Status.Phase = v1alpha1.PhaseFailed
	nd.Status.CompletionTime = &metav1.Time{Time: s.now}
	msg = condition.Cap(msg)
	s.setCondition(v1alpha1.ConditionBlocked, metav1.ConditionTrue, reason, msg)
	s.setCondition(v1alpha1.ConditionDrained, metav1.ConditionFalse, reason, msg)
	s.afterWrite(func() {
		r.Events.Eventf(nd, nil, corev1.EventTypeWarning, v1alpha1.EventFailed, "Drain", "%s", msg)
		metrics.DrainsTotal.WithLabelValues(string(v1alpha1.PhaseFailed)).Inc()
	})
	s.stop = true
}

// forceDelete deletes the pods that must leave and may be deleted, and
// reports how many it deleted and how many are still on their way out.
func (r *Reconciler) forceDelete(ctx context.Context, s *scope, plan drain.Plan, why string) (deleted, leaving int, _ error) {
	nd := s.drain
	for _, d := range plan.Decisions {
		if d.Action == drain.Wait && d.Reason == drain.ReasonTerminating {
			leaving++
			continue
		}
		if d.Action != drain.Evict && d.Action != drain.Block {
			continue
		}
		if _, held := s.evac.holding[d.Pod.UID]; held {
			continue // safety invariant 3: never before its evacuation is Completed
		}
		s.log.Info("deleting pod after a timeout (policy onTimeout: ForceDelete)", "pod", klogRef(d.Key()), "why", why)
		err := r.Client.Delete(ctx, d.Pod, ctrl.Preconditions{UID: &d.Pod.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return deleted, leaving, fmt.Errorf("deleting pod %s after a timeout: %w", d.Key(), err)
		}
		deleted++
		r.Events.Eventf(nd, d.Pod, corev1.EventTypeWarning, v1alpha1.EventForceDeleted, "Delete",
			"deleted pod %s: %s (policy onTimeout: ForceDelete)", d.Key(), why)
	}
	return deleted, leaving, nil
}

// sparedPods are the pods that must leave but that ForceDelete never
// deletes, each with why.
func sparedPods(s *scope, plan drain.Plan) []string {
	var out []string
	for _, d := range plan.Decisions {
		switch b, held := s.evac.holding[d.Pod.UID]; {
		case held:
			out = append(out, fmt.Sprintf("%s (held by %s)", d.Key(), b.Holder))
		case d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion:
			out = append(out, d.Key()+" (annotated "+drain.PodAnnotation+": "+drain.AnnotationWaitCompleted+")")
		}
	}
	return out
}

// listSome names at most n items, then how many more.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// finalize marks the drain Drained, once, when the evacuations after
// eviction are Completed.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	if reason, why, over := overdue(s); over && len(s.evac.pending) > 0 {
		return r.timeout(ctx, s, *s.plan, reason, why)
	}
	if len(s.evac.pending) > 0 { // the Evacuated condition says which
		nd.Status.Phase = v1alpha1.PhaseEvacuating
		return reconcile.Result{RequeueAfter: s.evac.recheck}, nil
	}
	nd.Status.Phase = v1alpha1.PhaseDrained
	nd.Status.CompletionTime = &metav1.Time{Time: s.now}
	r.forgetNode(nd.Spec.NodeName)
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	took := s.now.Sub(nd.Status.StartTime.Time)
	s.setCondition(v1alpha1.ConditionDrained, metav1.ConditionTrue, v1alpha1.ReasonDrained,
		fmt.Sprintf("%d pod(s) left the node in %s", nd.Status.Evicted, took.Round(time.Second)))
	node, evicted, log := s.node, nd.Status.Evicted, s.log
	s.afterWrite(func() {
		r.Events.Eventf(nd, node, corev1.EventTypeNormal, v1alpha1.EventDrained, "Drain", "node %s drained: %d pod(s) left in %s",
			nd.Spec.NodeName, evicted, took.Round(time.Second))
		metrics.DrainsTotal.WithLabelValues(string(v1alpha1.PhaseDrained)).Inc()
		metrics.DrainDuration.Observe(took.Seconds())
		log.Info("drained node", "node", klogRef(nd.Spec.NodeName), "evicted", evicted, "took", took)
	})
	return reconcile.Result{}, nil
}

// uncordon gives the node back if vacate cordoned it for this drain (the
// annotation names it): schedulable again, annotation removed. A conflict
// is returned as such, for the caller to retry.
func (r *Reconciler) uncordon(ctx context.Context, s *scope, node *corev1.Node) error {
	if !s.drain.Cordoned(node) {
		return nil
	}
	s.log.Info("uncordoning node that vacate cordoned", "node", klogRef(node.Name))
	if _, err := cordon.Uncordon(ctx, r.Client, node, s.drain); err != nil {
		return err
	}
	r.Events.Eventf(s.drain, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Restore", "uncordoned node %s", node.Name)
	return nil
}

// undoing says how far the undo may go: whether the node is going away
// (nothing is cancelled then) and whether timeouts.cancel has passed. The
// bound comes from the node's policy; the default when it cannot be read.
func (r *Reconciler) undoing(ctx context.Context, s *scope, node *corev1.Node, nodeGone bool) undoing {
	u := undoing{nodeGoing: nodeGone || !node.DeletionTimestamp.IsZero(), limit: policy.DefaultCancelTimeout}
	var n *corev1.Node
	if !nodeGone {
		n = node
	}
	if p, err := policy.Resolve(ctx, r.Client, s.drain.Spec.PolicyName, n); err == nil {
		u.limit = p.CancelTimeout
	}
	u.expired = s.now.Sub(s.drain.Status.UndoStartTime.Time) >= u.limit
	return u
}

// undo stops the drain and restores exactly what vacate changed: it
// uncordons the node only if vacate cordoned it (the annotation names this
// drain), removes vacate's annotation, then releases the finalizer.
func (r *Reconciler) undo(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	if !controllerutil.ContainsFinalizer(nd, v1alpha1.FinalizerRestore) {
		return reconcile.Result{}, nil
	}
	wasActive := nd.Status.Phase != "" && nd.Status.Phase != v1alpha1.PhasePending
	cancelled := wasActive && !nd.Ended() && nd.Status.Phase != v1alpha1.PhaseRestoring
	nd.Status.Phase = v1alpha1.PhaseRestoring
	if nd.Status.UndoStartTime == nil {
		nd.Status.UndoStartTime = &metav1.Time{Time: s.now}
	}
	dropped := r.forgetNode(nd.Spec.NodeName)
	r.blocked.set(nd.Name)

	// A fresh read, not the cache: a cordon patched an instant ago may not
	// be in the cache yet, and must still be undone.
	node := &corev1.Node{}
	err := r.fresh().Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	nodeGone := apierrors.IsNotFound(err)
	u := r.undoing(ctx, s, node, nodeGone)
	// The providers undo their evacuations before the node is given back,
	// within timeouts.cancel.
	wait := min(requeue.Resync, max(nd.Status.UndoStartTime.Add(u.limit).Sub(s.now), time.Second))
	if gone, err := r.cancelEvacuations(ctx, s, u); err != nil || !gone {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	if acked, err := r.cancelHooks(ctx, s, u); err != nil || !acked {
		return reconcile.Result{RequeueAfter: min(wait, 2*time.Second)}, err
	}
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	if !nodeGone {
		if changed, err := cordon.LetDaemonSetsBack(ctx, r.Client, node, nd); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		} else if changed {
			r.Events.Eventf(nd, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Restore",
				"removed the taint %s from node %s: DaemonSets may put their pods back", v1alpha1.TaintDaemonSetsOff, node.Name)
		}
	}
	switch {
	case nodeGone:
	case nd.Cordoned(node):
		if err := r.uncordon(ctx, s, node); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
	default:
		if wasActive {
			r.Events.Eventf(nd, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Restore",
				"left node %s as it was: vacate did not cordon it", node.Name)
		}
	}
	if cancelled {
		log := s.log
		s.afterWrite(func() {
			metrics.DrainsTotal.WithLabelValues(metrics.ResultCancelled).Inc()
			log.Info("drain cancelled and undone", "droppedEvictions", dropped)
		})
	}
	if !nd.DeletionTimestamp.IsZero() {
		if err := r.patchFinalizer(ctx, nd, controllerutil.RemoveFinalizer); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("releasing finalizer of NodeDrain %s: %w", nd.Name, err)
		}
		return reconcile.Result{}, nil
	}
	// No requester is left but the object stays: it is idle until one returns.
	nd.Status.Phase = v1alpha1.PhasePending
	// A requester that returns starts a new drain, counted from zero.
	nd.Status.Blockers, nd.Status.Blocked, nd.Status.BlockersOmitted, nd.Status.Hooks = nil, 0, 0, nil
	nd.Status.HooksOmitted, nd.Status.HookCalls, nd.Status.RunID = 0, nil, "" // the next request is a new run
	nd.Status.Total, nd.Status.Evicted, nd.Status.Remaining, nd.Status.Progress = 0, 0, 0, ""
	nd.Status.StartTime, nd.Status.CompletionTime, nd.Status.RequestTime, nd.Status.QueuePosition = nil, nil, nil, 0
	nd.Status.UndoStartTime, nd.Status.Mode, nd.Status.Deadline, nd.Status.Run = nil, "", nil, nil
	s.setCondition(v1alpha1.ConditionCordoned, metav1.ConditionFalse, v1alpha1.ReasonRestored, "no requester is left; vacate undid its changes")
	meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionAdmitted)
	meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionBlocked)
	meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionDrained)
	meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionNoExecuteTaint)
	if err := r.patchFinalizer(ctx, nd, controllerutil.RemoveFinalizer); err != nil {
		return reconcile.Result{}, fmt.Errorf("releasing finalizer of NodeDrain %s: %w", nd.Name, err)
	}
	return reconcile.Result{}, nil
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
