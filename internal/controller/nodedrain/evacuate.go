package nodedrain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hold"
)

// RBAC for evacuations.
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuations,verbs=get;list;watch;create;update;patch;delete;manage
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// evacState is what a pass learned about the drain's evacuations.
type evacState struct {
	// holds says which pods wait for a BeforeEviction evacuation or their
	// HTTP hook, with the blocker that says why.
	holds *hold.Model
	// pending describes the evacuations not Completed: the node is not
	// Drained while any is (a protected pod may leave by other means).
	pending []string
	// timedOut describes the evacuations past timeouts.evacuation.
	timedOut []string
	// recheck is when a waiting evacuation may turn stale or time out.
	recheck time.Duration
}

// evacuate asks every provider whose pods leave the node (in Decommission:
// every provider that takes part in it) to evacuate them: one Evacuation
// each, for this drain, recording the pods it protects. Holds come from the
// Evacuations, not from the providers as they are now: a pod an Evacuation
// protects waits until it is Completed for the current generation (or
// released), whatever happens to the provider or the pod's labels; so does
// a pod a provider selects before its Evacuation records it (one being
// deleted is asked again once it is gone). It then calls the pods' HTTP
// hooks, and holds computes which pods wait and why (internal/hold), as the
// guard before every eviction call does. The node is not Drained until the
// AfterEviction ones are Completed (finalize). Unknown, stale or failed
// answers are never taken as done.
func (r *Reconciler) evacuate(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	s.evac = evacState{recheck: requeue.Resync}
	registered := &v1alpha1.EvacuationProviderList{}
	if err := r.Client.List(ctx, registered); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	plan, err := r.plan(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	onNode := map[types.UID]*corev1.Pod{}
	var leaving []*corev1.Pod // the pods this drain moves, and so the ones an evacuation can protect
	for _, d := range plan.Decisions {
		onNode[d.Pod.UID] = d.Pod
		if d.Action != drain.Skip {
			leaving = append(leaving, d.Pod)
		}
	}
	evacs, err := r.evacuationsOf(ctx, nd)
	if err != nil {
		return reconcile.Result{}, err
	}
	for i := range registered.Items {
		p := &registered.Items[i]
		if have := evacs[p.Name]; have != nil && !have.DeletionTimestamp.IsZero() {
			continue // cancelled below; asked again once it is gone
		}
		ev, err := r.ask(ctx, s, p, leaving, evacs[p.Name])
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if ev != nil {
			evacs[p.Name] = ev
		}
	}
	// Someone deleted these (a person, or the garbage collector): their
	// providers are asked to cancel, then they go, and the next pass asks
	// again. Until then they hold what they held.
	for _, ev := range evacs {
		if !ev.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
			if _, err := r.cancelOne(ctx, s, ev, r.deletedWhileRunning(s, ev)); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	httpHooks, hookStates, err := r.callHooks(ctx, s, leaving, onNode)
	if err != nil {
		return reconcile.Result{}, err
	}
	h, err := hold.Compute(hold.Input{Drain: nd, Node: s.node, OnNode: onNode, Leaving: leaving, Evacuations: evacs,
		Providers: itemsOf(registered), Selects: r.selector(ctx), Hooks: hookStates, Now: s.now})
	if err != nil {
		return reconcile.Result{}, err
	}
	s.evac.holds = h
	hooks := r.reportEvacuations(s, h)
	r.noteReleases(s, hooks)
	hooks = append(hooks, r.reportHooks(s, httpHooks)...)
	nd.Status.Hooks, nd.Status.HooksOmitted = boundHooks(hooks)
	// Pods that became held since they were queued are taken out of the queue.
	for _, uid := range h.Held() {
		r.Evictions.Forget(uid)
	}
	completed, before := h.BeforeEviction()
	s.found.evacuations = &evacuationCounts{reported: len(hooks), before: before, completed: completed, pending: s.evac.pending}
	return reconcile.Result{}, nil
}

// reportEvacuations describes the drain's Evacuations for status.hooks,
// records those not Completed (pending) and those past
// timeouts.evacuation, and notes when to look again.
func (r *Reconciler) reportEvacuations(s *scope, h *hold.Model) []v1alpha1.HookStatus {
	var hooks []v1alpha1.HookStatus
	for _, v := range h.Evacuations() {
		ev := v.Evacuation
		s.evac.recheck = min(s.evac.recheck, v.StaleIn)
		phase := string(ev.CurrentPhase())
		switch {
		case ev.Spec.Release != nil:
			phase = v1alpha1.PhaseReleased
		case !v.Done && r.evacuationTimedOut(s, ev.Name, ev.CreationTimestamp.Time):
			phase = v1alpha1.PhaseTimedOut
		}
		hooks = append(hooks, v1alpha1.HookStatus{Name: ev.Name, Phase: phase, Message: truncate(v.Why, maxDetail)})
		if !v.Done {
			s.evac.pending = append(s.evac.pending, ev.Name+": "+v.Why)
		}
	}
	return hooks
}

// reportHooks marks the HTTP hooks past timeouts.evacuation (counted from
// the drain's first pass after admission, when hooks are first called),
// and looks again soon while any is unfinished: answers arrive in the
// background (the prober's Changed wakes the drain too).
func (r *Reconciler) reportHooks(s *scope, hooks []v1alpha1.HookStatus) []v1alpha1.HookStatus {
	start := s.drain.Status.StartTime
	for i := range hooks {
		if hooks[i].Phase == string(v1alpha1.EvacuationCompleted) {
			continue
		}
		s.evac.recheck = min(s.evac.recheck, 2*time.Second)
		if start != nil && r.evacuationTimedOut(s, hooks[i].Name, start.Time) {
			hooks[i].Phase = v1alpha1.PhaseTimedOut
		}
	}
	return hooks
}

// noteReleases records, once, each evacuation released since the last pass.
func (r *Reconciler) noteReleases(s *scope, hooks []v1alpha1.HookStatus) {
	was := map[string]string{}
	for _, h := range s.drain.Status.Hooks {
		was[h.Name] = h.Phase
	}
	for _, h := range hooks {
		if h.Phase != v1alpha1.PhaseReleased || was[h.Name] == v1alpha1.PhaseReleased {
			continue
		}
		nd, msg := s.drain, fmt.Sprintf("Evacuation %s %s; the pods it protected may now be evicted", h.Name, h.Message)
		s.log.Info("evacuation released by hand", "evacuation", klogRef(h.Name), "detail", h.Message)
		s.afterWrite(func() {
			r.Events.Eventf(nd, nil, corev1.EventTypeWarning, v1alpha1.EventEvacuationReleased, "Release", "%s", msg)
		})
	}
}

// evacuationTimedOut reports whether an unfinished evacuation asked for
// at asked ran past timeouts.evacuation (counted from the drain's admission
// at the earliest) and records it; otherwise it notes when to look again.
func (r *Reconciler) evacuationTimedOut(s *scope, name string, asked time.Time) bool {
	limit := s.policy.EvacuationTimeout
	if limit <= 0 {
		return false
	}
	if st := s.drain.Status.StartTime; st != nil && st.After(asked) {
		asked = st.Time
	}
	if left := asked.Add(limit).Sub(s.now); left > 0 {
		s.evac.recheck = min(s.evac.recheck, left)
		return false
	}
	s.evac.timedOut = append(s.evac.timedOut, fmt.Sprintf("%s not Completed within %s", name, limit))
	return true
}

// hookRank orders status.hooks when not all fit: those that need attention first.
var hookRank = map[string]int{
	v1alpha1.PhaseReleased: 0, v1alpha1.PhaseTimedOut: 1, string(v1alpha1.EvacuationFailed): 2, string(v1alpha1.EvacuationPending): 3,
	string(v1alpha1.EvacuationInProgress): 4, string(v1alpha1.EvacuationCancelled): 5, string(v1alpha1.EvacuationCompleted): 6,
}

// boundHooks keeps at most v1alpha1.MaxHooks entries, in their order when
// all fit, else those that need attention first (then by name), and counts
// the rest.
func boundHooks(hooks []v1alpha1.HookStatus) ([]v1alpha1.HookStatus, int32) {
	if len(hooks) <= v1alpha1.MaxHooks {
		return hooks, 0
	}
	sorted := slices.Clone(hooks)
	slices.SortStableFunc(sorted, func(a, b v1alpha1.HookStatus) int {
		if d := hookRank[a.Phase] - hookRank[b.Phase]; d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return sorted[:v1alpha1.MaxHooks], int32(len(hooks) - v1alpha1.MaxHooks)
}
