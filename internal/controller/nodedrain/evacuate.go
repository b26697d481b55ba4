package nodedrain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/evacuationprovider"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hook"
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

// ask makes sure a provider that takes part in this drain has its
// Evacuation, recording the leaving pods it protects now. A provider is
// asked when it protects leaving pods, or, in Decommission, always (a
// DaemonSet storage agent or data whose consumers run elsewhere must move
// too; a provider with nothing there answers Completed at once). A provider
// being deleted is asked nothing new, but what it was asked still holds.
// It returns the Evacuation, or nil when the provider is not asked.
func (r *Reconciler) ask(ctx context.Context, s *scope, p *v1alpha1.EvacuationProvider, leaving []*corev1.Pod, have *v1alpha1.Evacuation) (*v1alpha1.Evacuation, error) {
	mode := modeOf(s.drain)
	if !providers.Eligible(p, mode) {
		return nil, nil
	}
	protected, err := r.protectedBy(ctx, p, leaving)
	if err != nil {
		return nil, err
	}
	if !providers.Asks(p, mode, len(protected), have != nil && ours(have, s.drain, s.node)) {
		return nil, nil // it protects nothing that leaves
	}
	// The finalizer first: the provider cannot vanish while the Evacuation
	// it is asked for is unfinished.
	if ok, err := evacuationprovider.AddFinalizer(ctx, r.Client, p); err != nil || !ok {
		return nil, err
	}
	return r.ensureEvacuation(ctx, s.drain, s.node, p, protected, have)
}

// ours reports whether an Evacuation was asked by this drain for this node
// (one written before spec.nodeUID existed counts as this node's).
func ours(ev *v1alpha1.Evacuation, nd *v1alpha1.NodeDrain, node *corev1.Node) bool {
	return providers.AskedFor(ev, nd.UID, node.UID)
}

// evacuationsOf are the Evacuations of the drain's node, by provider name,
// those being deleted included (the finalizer vacate.dev/cancel keeps them
// until their provider was asked to cancel; their holds stay until then).
func (r *Reconciler) evacuationsOf(ctx context.Context, nd *v1alpha1.NodeDrain) (map[string]*v1alpha1.Evacuation, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing Evacuations: %w", err)
	}
	out := map[string]*v1alpha1.Evacuation{}
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName == nd.Spec.NodeName {
			out[ev.Spec.Provider] = ev
		}
	}
	return out, nil
}

// protectedBy are the leaving pods that the provider protects
// (providers.Protected).
func (r *Reconciler) protectedBy(ctx context.Context, p *v1alpha1.EvacuationProvider, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	return providers.Protected(p, pods, r.namespaceLabels(ctx))
}

// selects reports whether the provider's selectors pick the pod
// (providers.Selects).
func (r *Reconciler) selects(ctx context.Context, p *v1alpha1.EvacuationProvider, pod *corev1.Pod) (bool, error) {
	return providers.Selects(p, pod, r.namespaceLabels(ctx))
}

// ensureEvacuation creates the drain's Evacuation for the provider, or
// brings the one there up to date: an earlier drain's is taken over (its
// spec replaced); this drain's gets the drain's mode, Evacuate, and any
// newly protected pods added (never removed), and its stage only moves
// toward BeforeEviction (holding more, never less). Its reporter follows
// the provider's (only that identity may write its status), and it carries
// the finalizer vacate.dev/cancel, which only vacate removes, once the
// provider was asked to cancel or its work is kept: deleting the drain in
// the foreground, or the Evacuation itself, never skips the cancel.
func (r *Reconciler) ensureEvacuation(ctx context.Context, nd *v1alpha1.NodeDrain, node *corev1.Node, p *v1alpha1.EvacuationProvider, protected []*corev1.Pod, ev *v1alpha1.Evacuation) (*v1alpha1.Evacuation, error) {
	name := v1alpha1.EvacuationName(nd.Spec.NodeName, p.Name)
	want := v1alpha1.EvacuationSpec{NodeName: nd.Spec.NodeName, NodeUID: string(node.UID), Provider: p.Name, Mode: modeOf(nd),
		Desired: v1alpha1.DesiredEvacuate, DrainUID: string(nd.UID), Stage: providerStage(p), Reporter: p.Spec.Reporter.UserName()}
	if ev != nil && ours(ev, nd, node) {
		want.ProtectedPods = slices.Clone(ev.Spec.ProtectedPods)
		want.Release = ev.Spec.Release
		if stageOf(ev) == v1alpha1.StageBeforeEviction {
			want.Stage = v1alpha1.StageBeforeEviction
		}
	}
	for _, pod := range protected {
		if !slices.ContainsFunc(want.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) }) {
			want.ProtectedPods = append(want.ProtectedPods, v1alpha1.ProtectedPod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
		}
	}
	if ev == nil {
		ev = &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.FinalizerCancel}}, Spec: want}
		if err := controllerutil.SetOwnerReference(nd, ev, r.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Client.Create(ctx, ev); err != nil {
			return nil, fmt.Errorf("creating Evacuation %s: %w", name, err) // AlreadyExists: the cache is behind; the next pass reads it
		}
		return ev, nil
	}
	if equality.Semantic.DeepEqual(ev.Spec, want) && controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
		return ev, nil
	}
	patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(ev, v1alpha1.FinalizerCancel) // one created by an older version has none
	if !ours(ev, nd, node) {                                  // left by an earlier drain, or for a node of the same name before: this drain takes it over
		ev.OwnerReferences = nil
		if err := controllerutil.SetOwnerReference(nd, ev, r.Client.Scheme()); err != nil {
			return nil, err
		}
	}
	ev.Spec = want
	if err := r.Client.Patch(ctx, ev, patch); err != nil {
		return nil, err // a conflict is retried by the caller
	}
	return ev, nil
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

// undoing is what an undo pass knows beyond the drain.
type undoing struct {
	// nodeGoing: the node is being deleted, or is gone. Nothing is
	// cancelled: what was moved off it stays moved.
	nodeGoing bool
	// expired: timeouts.cancel passed; whoever has not confirmed is no
	// longer waited for.
	expired bool
	limit   time.Duration
}

// keepsItsWork reports whether an evacuation is left done rather than
// cancelled: the node goes away, or it is a Decommission evacuation that
// finished (a Decommission moves data for good).
func keepsItsWork(ev *v1alpha1.Evacuation, u undoing) bool {
	if u.nodeGoing {
		return true
	}
	current := ev.Generation > 0 && ev.Status.ObservedGeneration == ev.Generation
	finished := ev.Spec.Release != nil || (current && ev.Status.Phase == v1alpha1.EvacuationCompleted && ev.Spec.Desired == v1alpha1.DesiredEvacuate)
	return ev.Spec.Mode == v1alpha1.ModeDecommission && finished
}

// cancelEvacuations asks every provider that worked for a drain of this
// node to undo it (desired: Cancel) while the drain is reversible, lets
// each Evacuation go once its provider reports Cancelled (or if it never
// took the request up, or its work is kept, or timeouts.cancel passed), and
// reports whether all are gone. Evacuations already being deleted (the
// drain deleted in the foreground, or someone deleted them) are cancelled
// the same way: vacate's finalizer keeps them until then.
func (r *Reconciler) cancelEvacuations(ctx context.Context, s *scope, u undoing) (bool, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return false, fmt.Errorf("listing Evacuations: %w", err)
	}
	var waiting []string
	var hooks []v1alpha1.HookStatus
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName != s.drain.Spec.NodeName {
			continue
		}
		if !ev.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
			continue // going, and not held by vacate
		}
		h, err := r.cancelOne(ctx, s, ev, u)
		if err != nil {
			return false, err
		}
		if h != nil {
			waiting = append(waiting, ev.Name)
			hooks = append(hooks, *h)
		}
	}
	if len(waiting) > 0 {
		s.drain.Status.Hooks, s.drain.Status.HooksOmitted = boundHooks(hooks)
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonCancelling,
			fmt.Sprintf("waiting for the providers to undo their evacuations before restoring the node (at most %s, timeouts.cancel): %s",
				u.limit, strings.Join(waiting, ", ")))
		return false, nil
	}
	return true, nil
}

// deletedWhileRunning is how far the cancel of an Evacuation someone
// deleted while its drain runs may go: the node stays, and timeouts.cancel
// counts from the deletion.
func (r *Reconciler) deletedWhileRunning(s *scope, ev *v1alpha1.Evacuation) undoing {
	limit := s.policy.CancelTimeout
	return undoing{limit: limit, expired: s.now.Sub(ev.DeletionTimestamp.Time) >= limit}
}

// cancelOne asks one Evacuation's provider to undo it, and lets the
// Evacuation go (vacate's finalizer removed, deleted) once it may: the
// provider confirmed the cancel, or never took the request up, or is gone,
// or its work is kept, or timeouts.cancel passed. It returns the
// Evacuation's state while it waits, nil once it let it go.
func (r *Reconciler) cancelOne(ctx context.Context, s *scope, ev *v1alpha1.Evacuation, u undoing) (*v1alpha1.HookStatus, error) {
	waiting := &v1alpha1.HookStatus{Name: ev.Name, Phase: string(ev.CurrentPhase())}
	untouched := ev.Status.ObservedGeneration == 0 && ev.Status.HeartbeatTime == nil
	cancelled := ev.Status.Phase == v1alpha1.EvacuationCancelled && ev.Status.ObservedGeneration == ev.Generation &&
		ev.Spec.Desired == v1alpha1.DesiredCancel
	provider := &v1alpha1.EvacuationProvider{}
	perr := r.Client.Get(ctx, types.NamespacedName{Name: ev.Spec.Provider}, provider)
	gone := apierrors.IsNotFound(perr)
	kept := keepsItsWork(ev, u)
	if untouched || cancelled || gone || kept || u.expired {
		switch {
		case untouched || cancelled:
		case kept:
			s.log.Info("leaving an evacuation's work in place: the drain is not reversible", "evacuation", klogRef(ev.Name), "nodeGoing", u.nodeGoing)
		case gone:
			r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventProviderGone, "Cancel",
				"EvacuationProvider %s is gone: nobody can undo Evacuation %s; deleting it", ev.Spec.Provider, ev.Name)
		default:
			r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
				"EvacuationProvider %s did not confirm the cancel of Evacuation %s within %s (timeouts.cancel); giving the node back without it: what it moved may stay moved",
				ev.Spec.Provider, ev.Name, u.limit)
		}
		// For an untouched one, the lock: a provider that took it up since
		// our cache saw it is asked to cancel instead.
		locked := untouched && !kept && !u.expired
		if err := r.letGo(ctx, ev, locked); apierrors.IsConflict(err) {
			return waiting, nil
		} else if err != nil {
			return nil, err
		}
		return nil, nil
	}
	if ev.Spec.Desired != v1alpha1.DesiredCancel {
		patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
		ev.Spec.Desired = v1alpha1.DesiredCancel
		if err := r.Client.Patch(ctx, ev, patch); apierrors.IsConflict(err) {
			return waiting, nil
		} else if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cancelling Evacuation %s: %w", ev.Name, err)
		}
	}
	if perr != nil {
		provider = nil
	}
	_, why, _ := judge(ev, provider, s.now)
	waiting.Phase, waiting.Message = string(ev.CurrentPhase()), truncate("cancelling: "+why, maxDetail)
	return waiting, nil
}

// letGo removes vacate's finalizer from an Evacuation and deletes it. With
// locked, both only happen to the version the pass read (a conflict says
// it changed).
func (r *Reconciler) letGo(ctx context.Context, ev *v1alpha1.Evacuation, locked bool) error {
	if controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
		opts := []ctrl.MergeFromOption{}
		if locked {
			opts = append(opts, ctrl.MergeFromWithOptimisticLock{})
		}
		patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), opts...)
		controllerutil.RemoveFinalizer(ev, v1alpha1.FinalizerCancel)
		if err := r.Client.Patch(ctx, ev, patch); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("releasing Evacuation %s: %w", ev.Name, err)
		}
	}
	if !ev.DeletionTimestamp.IsZero() {
		return nil // removing the finalizer let it go
	}
	pre := ctrl.Preconditions{UID: &ev.UID}
	if locked {
		pre.ResourceVersion = &ev.ResourceVersion
	}
	if err := r.Client.Delete(ctx, ev, pre); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return err
		}
		return fmt.Errorf("deleting Evacuation %s: %w", ev.Name, err)
	}
	return nil
}

// judge says whether an evacuation counts as done, why not, and how soon
// it turns stale if nothing changes. Only Completed for the current spec
// is done; silence past the provider's timeout is reported as such.
func judge(ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, now time.Time) (done bool, why string, staleIn time.Duration) {
	timeout := providers.Timeout(p)
	st := ev.Status
	if ev.CurrentPhase() == v1alpha1.EvacuationCompleted {
		return true, "Completed: " + st.Message, requeue.Resync
	}
	silent := now.Sub(ev.LastHeard())
	if !ev.Answered() {
		if silent >= timeout {
			return false, fmt.Sprintf("provider %s has not taken up the request for %s (timeout %s): is it running?", ev.Spec.Provider, silent.Round(time.Second), timeout), requeue.Resync
		}
		return false, fmt.Sprintf("waiting for provider %s to take up the request", ev.Spec.Provider), timeout - silent
	}
	if silent >= timeout {
		return false, fmt.Sprintf("provider %s is stale: no heartbeat for %s (timeout %s); its last word: %s %s", ev.Spec.Provider,
			silent.Round(time.Second), timeout, st.Phase, st.Message), requeue.Resync
	}
	if st.Phase == v1alpha1.EvacuationFailed {
		return false, fmt.Sprintf("provider %s failed: %s", ev.Spec.Provider, st.Message), timeout - silent
	}
	msg := fmt.Sprintf("%s: %s", st.Phase, st.Message)
	if st.Remaining > 0 {
		msg += fmt.Sprintf(" (%d remaining)", st.Remaining)
	}
	return false, msg, timeout - silent
}

// hookRun is the drain's current run, as the hook protocol names it.
func hookRun(nd *v1alpha1.NodeDrain) hook.Run {
	return hook.Run{Drain: string(nd.UID), ID: nd.Status.RunID, Node: nd.Spec.NodeName, Mode: string(modeOf(nd))}
}

// hookTargets are the leaving pods whose HTTP hooks the policy allows, with
// their targets (or why the annotations cannot be used, or why the address
// is never called).
func (r *Reconciler) hookTargets(ctx context.Context, s *scope, pods []*corev1.Pod) ([]*corev1.Pod, []hook.Target, []error, error) {
	var outPods []*corev1.Pod
	var targets []hook.Target
	var errs []error
	if !s.policy.HTTPHooks {
		return nil, nil, nil, nil
	}
	run := hookRun(s.drain)
	for _, pod := range pods {
		if ok, err := r.hookAllowed(ctx, s.policy, pod); err != nil || !ok {
			if err != nil {
				return nil, nil, nil, err
			}
			continue
		}
		t, err := hook.TargetFor(pod, run, r.AllowLoopbackHooks)
		outPods, targets, errs = append(outPods, pod), append(targets, t), append(errs, err)
	}
	return outPods, targets, errs, nil
}

// hookCalls is what a pass knows of the pods whose hooks the run calls.
type hookCalls struct {
	// written: the pods status.hookCalls recorded when the pass read the
	// drain; only these are called.
	written map[string]bool
	// next is the list this pass writes.
	next []v1alpha1.HookCall
}

// newHookCalls keeps the recorded calls of pods still on the node.
func newHookCalls(st *v1alpha1.NodeDrainStatus, onNode map[types.UID]*corev1.Pod) *hookCalls {
	hc := &hookCalls{written: map[string]bool{}}
	for _, c := range st.HookCalls {
		hc.written[c.UID] = true
		if _, ok := onNode[types.UID(c.UID)]; ok {
			hc.next = append(hc.next, c)
		}
	}
	return hc
}

// record adds a pod to the list, if there is room; it reports whether the
// pod is (now) recorded.
func (hc *hookCalls) record(uid types.UID) bool {
	if slices.ContainsFunc(hc.next, func(c v1alpha1.HookCall) bool { return c.UID == string(uid) }) {
		return true
	}
	if len(hc.next) >= v1alpha1.MaxHookCalls {
		return false
	}
	hc.next = append(hc.next, v1alpha1.HookCall{UID: string(uid)})
	return true
}

// completed marks a pod's Decommission evacuation Completed: a cancel keeps it.
func (hc *hookCalls) completed(uid types.UID) {
	for i := range hc.next {
		if hc.next[i].UID == string(uid) {
			hc.next[i].Completed = true
		}
	}
}

// callHooks runs the HTTP hooks of the leaving pods: each pod is held until
// its own hook answers Completed for this run. A pod is called only once
// status.hookCalls, as written, records it, so a cancel reaches every hook
// that may have accepted a POST, whatever happens to the controller. A pod
// whose hook address is refused is held with a blocker saying why and the
// way out. Conversations of pods no longer called are dropped.
func (r *Reconciler) callHooks(ctx context.Context, s *scope, leaving []*corev1.Pod, onNode map[types.UID]*corev1.Pod) ([]v1alpha1.HookStatus, int, int, error) {
	pods, targets, errs, err := r.hookTargets(ctx, s, leaving)
	if err != nil {
		return nil, 0, 0, err
	}
	st := &s.drain.Status
	if len(pods) > 0 && st.RunID == "" {
		st.RunID = string(uuid.NewUUID()) // a new run: its calls are made once this is written
	}
	calls := newHookCalls(st, onNode)
	talking := map[types.UID]bool{}
	var hooks []v1alpha1.HookStatus
	done := 0
	for i, pod := range pods {
		name := "pod/" + pod.Namespace + "/" + pod.Name
		h, reason := r.callHook(s, pod, targets[i], errs[i], calls, talking)
		h.Name = name
		if h.Phase == string(v1alpha1.EvacuationCompleted) {
			done++
			hooks = append(hooks, h)
			continue
		}
		// A hook is called from the drain's first pass after admission.
		if st.StartTime != nil && r.evacuationTimedOut(s, name, st.StartTime.Time) {
			h.Phase = v1alpha1.PhaseTimedOut
		}
		hooks = append(hooks, h)
		if _, held := s.evac.holding[pod.UID]; !held { // a provider's hold is shown first; both must finish
			s.evac.holding[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: reason,
				Holder: "HTTP hook of pod " + pod.Namespace + "/" + pod.Name, Detail: h.Message, Since: metav1.NewTime(s.now)}
		}
	}
	st.HookCalls = calls.next
	r.Hooks.Retain(s.drain.Spec.NodeName, talking)
	return hooks, len(pods), done, nil
}

// callHook is one pod's hook in this pass: its status and, when it holds
// the pod, the blocker's reason.
func (r *Reconciler) callHook(s *scope, pod *corev1.Pod, t hook.Target, terr error, calls *hookCalls, talking map[types.UID]bool) (v1alpha1.HookStatus, string) {
	pending := string(v1alpha1.EvacuationPending)
	switch {
	case hook.IsRefused(terr):
		return v1alpha1.HookStatus{Phase: string(v1alpha1.EvacuationFailed), Message: truncate(terr.Error()+
			"; the pod stays, as its data may not have moved: fix the pod (or its annotation "+hook.AnnotationPort+
			"), or leave its namespace out of the policy's httpHooks, or let timeouts.evacuation end the drain", maxDetail)}, v1alpha1.BlockerHTTPHookRefused
	case terr != nil:
		return v1alpha1.HookStatus{Phase: pending, Message: truncate(terr.Error()+"; the pod stays until it is fixed", maxDetail)}, v1alpha1.BlockerHTTPHook
	case !calls.written[string(pod.UID)]:
		why := "recording the call before the first POST"
		if !calls.record(pod.UID) {
			why = fmt.Sprintf("waiting: %d hooks are being called (at most %d at once)", len(calls.next), v1alpha1.MaxHookCalls)
		}
		return v1alpha1.HookStatus{Phase: pending, Message: "HTTP hook " + t.URL() + ": " + why}, v1alpha1.BlockerHTTPHook
	}
	talking[pod.UID] = true
	res := r.Hooks.Evacuate(t)
	h := v1alpha1.HookStatus{Message: truncate("HTTP hook "+t.URL()+": "+res.Describe(), maxDetail)}
	switch {
	case res.Done():
		h.Phase = string(v1alpha1.EvacuationCompleted)
		if modeOf(s.drain) == v1alpha1.ModeDecommission {
			calls.completed(pod.UID)
		}
	case res.State == hook.Failed:
		h.Phase = string(v1alpha1.EvacuationFailed)
	case res.State == "":
		h.Phase = pending
	default:
		h.Phase = string(v1alpha1.EvacuationInProgress)
	}
	return h, v1alpha1.BlockerHTTPHook
}

// cancelHooks asks the hooks that took part in this run to undo (DELETE)
// and reports whether every one acknowledged. The hooks are those
// status.hookCalls records, so a hook that accepted a POST gets its DELETE
// even after a controller restart; a Decommission evacuation that
// Completed is kept, and so is everything when the node goes away. A pod
// that has left cannot be asked, and holds nothing.
func (r *Reconciler) cancelHooks(ctx context.Context, s *scope, u undoing) (bool, error) {
	st := &s.drain.Status
	if u.nodeGoing || len(st.HookCalls) == 0 {
		return true, nil // the node goes away: what the apps moved stays moved
	}
	pods, err := r.podsOnNode(ctx, s.drain.Spec.NodeName)
	if err != nil {
		return false, err
	}
	byUID := map[string]*corev1.Pod{}
	for _, pod := range pods {
		byUID[string(pod.UID)] = pod
	}
	run := hookRun(s.drain)
	var left []v1alpha1.HookCall
	var hooks []v1alpha1.HookStatus
	for _, c := range st.HookCalls {
		pod, ok := byUID[c.UID]
		if !ok || c.Completed || !hook.Wants(pod) { // called under the policy of then: cancelled whatever it says now
			continue
		}
		t, err := hook.TargetFor(pod, run, r.AllowLoopbackHooks)
		if err != nil || r.Hooks.NeverReached(t) {
			continue // it cannot be called, or never got the POST
		}
		res, acknowledged := r.Hooks.Cancel(t)
		if acknowledged {
			r.Hooks.Forget(pod.UID)
			continue
		}
		left = append(left, c)
		hooks = append(hooks, v1alpha1.HookStatus{Name: "pod/" + pod.Namespace + "/" + pod.Name, Phase: string(v1alpha1.EvacuationInProgress),
			Message: truncate("cancelling: "+res.Describe(), maxDetail)})
	}
	st.HookCalls = left
	if len(hooks) > 0 && u.expired {
		names := make([]string, 0, len(hooks))
		for _, h := range hooks {
			names = append(names, h.Name)
		}
		r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
			"HTTP hook(s) of %s did not acknowledge the cancel within %s (timeouts.cancel); giving the node back without them",
			listSome(names, 10), u.limit)
		st.HookCalls = nil
		return true, nil
	}
	if len(hooks) > 0 {
		st.Hooks, st.HooksOmitted = boundHooks(hooks)
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, v1alpha1.ReasonCancelling,
			fmt.Sprintf("waiting for %d HTTP hook(s) to acknowledge the cancel before restoring the node (at most %s, timeouts.cancel)", len(hooks), u.limit))
		return false, nil
	}
	return true, nil
}

// stillTheTarget is the prober's check before every call, against the
// informer's current view: the pod is there with the same UID, and the
// target's IP is still one of its addresses and one vacate calls. A pod
// gone, replaced or moved to another IP is not called: the IP may belong
// to another pod by now.
func (r *Reconciler) stillTheTarget(t hook.Target) error {
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, t.Key, pod); err != nil {
		return fmt.Errorf("reading pod %s: %w", t.Name, err)
	}
	if pod.UID != t.Pod {
		return fmt.Errorf("pod %s is gone (another pod has its name)", t.Name)
	}
	return hook.CheckPod(pod, t.IP, r.AllowLoopbackHooks)
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
