package nodedrain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/providers"
)

// RBAC for evacuations.
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuations,verbs=get;list;watch;create;update;patch;delete;manage
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// evacState is what a pass learned about the drain's evacuations.
type evacState struct {
	// holding: protected pods (by UID) that wait for a BeforeEviction
	// evacuation or their HTTP hook, with the blocker that says why.
	holding map[types.UID]v1alpha1.Blocker
	// pending describes the evacuations not Completed: the node is not
	// Drained while any is (a protected pod may leave by other means).
	pending []string
	// timedOut describes the evacuations past timeouts.evacuation.
	timedOut []string
	// recheck is when a waiting evacuation may turn stale or time out.
	recheck time.Duration
}

// modeOf is the drain's mode, Maintenance when unset.
func modeOf(nd *v1alpha1.NodeDrain) v1alpha1.DrainMode {
	if nd.Spec.Mode == "" {
		return v1alpha1.ModeMaintenance
	}
	return nd.Spec.Mode
}

// stageOf is an Evacuation's recorded stage (providers.StageOf).
func stageOf(ev *v1alpha1.Evacuation) v1alpha1.EvacuationStage { return providers.StageOf(ev) }

// providerStage is a provider's stage (providers.Stage).
func providerStage(p *v1alpha1.EvacuationProvider) v1alpha1.EvacuationStage {
	return providers.Stage(p)
}

// takesPart reports whether a provider takes part in drains of this mode
// (providers.TakesPart).
func takesPart(p *v1alpha1.EvacuationProvider, mode v1alpha1.DrainMode) bool {
	return providers.TakesPart(p, mode)
}

// evacuate asks every provider whose pods leave the node (in Decommission:
// every provider that takes part in it) to evacuate them: one Evacuation
// each, for this drain, recording the pods it protects. Holds come from the
// Evacuations, not from the providers as they are now: a pod an Evacuation
// protects waits until it is Completed for the current generation (or
// released), whatever happens to the provider or the pod's labels. The node
// is not Drained until the AfterEviction ones are Completed (finalize).
// Unknown, stale or failed answers are never taken as done.
func (r *Reconciler) evacuate(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	s.evac = evacState{holding: map[types.UID]v1alpha1.Blocker{}, recheck: requeue.Resync}
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
	byName := map[string]*v1alpha1.EvacuationProvider{}
	for i := range registered.Items {
		p := &registered.Items[i]
		byName[p.Name] = p
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
	var hooks []v1alpha1.HookStatus
	before, completed, after := 0, 0, 0
	for _, name := range slices.Sorted(maps.Keys(evacs)) {
		ev := evacs[name]
		if !ours(ev, nd, s.node) {
			continue // another drain's or another node's, left behind; not this drain's to judge
		}
		held := providers.ProtectedOnNode(ev, onNode)
		done, why, staleIn := r.judgeFor(s, ev, byName[ev.Spec.Provider], len(held))
		if !ev.DeletionTimestamp.IsZero() && ev.Spec.Release == nil {
			done, why, staleIn = false, fmt.Sprintf("Evacuation %s is being deleted: vacate asks provider %s to cancel it, then asks again; "+
				"its pods stay until then", ev.Name, ev.Spec.Provider), min(staleIn, 2*time.Second)
		}
		s.evac.recheck = min(s.evac.recheck, staleIn)
		phase := string(ev.CurrentPhase())
		switch {
		case ev.Spec.Release != nil:
			phase = v1alpha1.PhaseReleased
		case !done && r.evacuationTimedOut(s, ev.Name, ev.CreationTimestamp.Time):
			phase = v1alpha1.PhaseTimedOut
		}
		hooks = append(hooks, v1alpha1.HookStatus{Name: ev.Name, Phase: phase, Message: truncate(why, maxDetail)})
		if !done {
			s.evac.pending = append(s.evac.pending, ev.Name+": "+why)
		}
		if stageOf(ev) == v1alpha1.StageAfterEviction {
			after++
			continue
		}
		before++
		if done {
			completed++
			continue
		}
		for _, pod := range held {
			s.evac.holding[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: v1alpha1.BlockerEvacuation,
				Holder: "Evacuation " + ev.Name, Detail: truncate(why, maxDetail), Since: ev.CreationTimestamp}
		}
	}
	r.noteReleases(s, hooks)
	httpHooks, withHook, hooksDone, err := r.callHooks(ctx, s, leaving, onNode)
	if err != nil {
		return reconcile.Result{}, err
	}
	hooks = append(hooks, httpHooks...)
	before, completed = before+withHook, completed+hooksDone
	if withHook > hooksDone {
		s.evac.recheck = min(s.evac.recheck, 2*time.Second) // answers arrive in the background; Changed wakes us too
	}
	nd.Status.Hooks, nd.Status.HooksOmitted = boundHooks(hooks)
	// Pods that became held since they were queued are taken out of the queue.
	for uid := range s.evac.holding {
		r.Evictions.Forget(uid)
	}
	switch {
	case len(hooks) == 0:
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, v1alpha1.ReasonNoEvacuations, "no evacuation protects pods on this node")
	case before > completed:
		nd.Status.Phase = v1alpha1.PhaseEvacuating
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonEvacuating,
			fmt.Sprintf("%d of %d evacuation(s) before eviction Completed; the pods they protect wait", completed, before))
	case len(s.evac.pending) > 0:
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonWaitingAfterEvict,
			"waiting for the evacuations after eviction: "+strings.Join(s.evac.pending, "; "))
	default:
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, v1alpha1.ReasonEvacuated,
			fmt.Sprintf("%d evacuation(s) Completed", before+after))
	}
	return reconcile.Result{}, nil
}

// judgeFor judges one of the drain's Evacuations: released counts as done;
// a provider deleted (or being deleted) while its evacuation is unfinished
// is said so, with the way out.
func (r *Reconciler) judgeFor(s *scope, ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, held int) (bool, string, time.Duration) {
	if rel := ev.Spec.Release; rel != nil {
		msg := fmt.Sprintf("released by %s at %s", rel.By, rel.Time.UTC().Format(time.RFC3339))
		if rel.Reason != "" {
			msg += ": " + rel.Reason
		}
		return true, msg, requeue.Resync
	}
	done, why, staleIn := judge(ev, p, s.now)
	if !done && (p == nil || !p.DeletionTimestamp.IsZero()) {
		why = fmt.Sprintf("provider %s deleted while evacuating %d pod(s) on node %s; they stay until it finishes, "+
			"or until someone runs 'vacate release %s --provider %s' (last word: %s)", ev.Spec.Provider, held, ev.Spec.NodeName,
			ev.Spec.NodeName, ev.Spec.Provider, why)
	}
	return done, why, staleIn
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
