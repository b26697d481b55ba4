package nodedrain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hook"
)

// RBAC for evacuations.
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// BlockerEvacuation: a pod waits for its provider's evacuation.
const BlockerEvacuation = "Evacuation"

// Condition reasons of evacuations.
const (
	ReasonEvacuating        = "Evacuating"
	ReasonEvacuated         = "EvacuationsCompleted"
	ReasonWaitingAfterEvict = "WaitingForAfterEviction"
	ReasonCancelling        = "CancellingEvacuations"
)

// DefaultProviderTimeout bounds a provider's silence when it does not say.
const DefaultProviderTimeout = time.Minute

// evacState is what a pass learned about the drain's evacuations.
type evacState struct {
	// holding: protected pods (by UID) that wait for a BeforeEviction
	// evacuation, with the blocker that says why.
	holding map[types.UID]v1alpha1.Blocker
	// pending describes the evacuations not Completed: the node is not
	// Drained while any is (a protected pod may leave by other means).
	pending []string
	// recheck is when a waiting evacuation may turn stale.
	recheck time.Duration
}

// modeOf is the drain's mode, Maintenance when unset.
func modeOf(nd *v1alpha1.NodeDrain) v1alpha1.DrainMode {
	if nd.Spec.Mode == "" {
		return v1alpha1.ModeMaintenance
	}
	return nd.Spec.Mode
}

// EvacuationName is the name of the Evacuation of node for provider.
func EvacuationName(node, provider string) string {
	name := node + "." + provider
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:253-17] + "-" + hex.EncodeToString(sum[:])[:16]
}

// evacuate asks every provider whose pods are on the node to evacuate them:
// one Evacuation each, for this drain. Pods a BeforeEviction evacuation
// protects wait until it is Completed (evict holds them); the node is not
// Drained until the AfterEviction ones are (finalize). Unknown, stale or
// failed answers are never taken as done.
func (r *Reconciler) evacuate(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	s.evac = evacState{holding: map[types.UID]v1alpha1.Blocker{}, recheck: resync}
	providers := &v1alpha1.EvacuationProviderList{}
	if err := r.Client.List(ctx, providers); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	sort.Slice(providers.Items, func(i, j int) bool { return providers.Items[i].Name < providers.Items[j].Name })
	plan, err := r.plan(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	var leaving []*corev1.Pod // the pods this drain moves, and so the ones an evacuation can protect
	for _, d := range plan.Decisions {
		if d.Action != drain.Skip {
			leaving = append(leaving, d.Pod)
		}
	}
	mode := modeOf(nd)
	var hooks []v1alpha1.HookStatus
	before, completed, after := 0, 0, 0
	for i := range providers.Items {
		p := &providers.Items[i]
		if len(p.Spec.Modes) > 0 && !slices.Contains(p.Spec.Modes, mode) {
			continue
		}
		protected, err := r.protectedBy(ctx, p, leaving)
		if err != nil {
			return reconcile.Result{}, err
		}
		ev, err := r.ensureEvacuation(ctx, nd, p.Name, mode, len(protected) > 0)
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		if ev == nil {
			continue // it protects nothing on this node
		}
		done, why, staleIn := judge(ev, p, s.now)
		s.evac.recheck = min(s.evac.recheck, staleIn)
		hooks = append(hooks, v1alpha1.HookStatus{Name: ev.Name, Phase: phaseOf(ev), Message: truncate(why, maxDetail)})
		stage := p.Spec.Stage
		if stage == "" {
			stage = v1alpha1.StageBeforeEviction
		}
		if !done {
			s.evac.pending = append(s.evac.pending, ev.Name+": "+why)
		}
		switch {
		case stage == v1alpha1.StageAfterEviction:
			after++
		case stage == v1alpha1.StageBeforeEviction:
			before++
			if done {
				completed++
				continue
			}
			for _, pod := range protected {
				s.evac.holding[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: BlockerEvacuation,
					Holder: "Evacuation " + ev.Name, Detail: truncate(why, maxDetail), Since: ev.CreationTimestamp}
			}
		}
	}
	httpHooks, withHook, hooksDone, err := r.callHooks(ctx, s, leaving)
	if err != nil {
		return reconcile.Result{}, err
	}
	hooks = append(hooks, httpHooks...)
	before, completed = before+withHook, completed+hooksDone
	if withHook > hooksDone {
		s.evac.recheck = min(s.evac.recheck, 2*time.Second) // answers arrive in the background; Changed wakes us too
	}
	nd.Status.Hooks = hooks
	switch {
	case len(hooks) == 0:
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, ReasonNoEvacuations, "no evacuation protects pods on this node")
	case before > completed:
		nd.Status.Phase = v1alpha1.PhaseEvacuating
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, ReasonEvacuating,
			fmt.Sprintf("%d of %d evacuation(s) before eviction Completed; the pods they protect wait", completed, before))
	case len(s.evac.pending) > 0:
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, ReasonWaitingAfterEvict,
			"waiting for the evacuations after eviction: "+strings.Join(s.evac.pending, "; "))
	default:
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, ReasonEvacuated,
			fmt.Sprintf("%d evacuation(s) Completed", before+after))
	}
	return reconcile.Result{}, nil
}

// protectedBy are the leaving pods that the provider protects.
func (r *Reconciler) protectedBy(ctx context.Context, p *v1alpha1.EvacuationProvider, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("EvacuationProvider %s: podSelector: %w", p.Name, err)
	}
	nsSel := labels.Everything()
	if p.Spec.NamespaceSelector != nil {
		if nsSel, err = metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector); err != nil {
			return nil, fmt.Errorf("EvacuationProvider %s: namespaceSelector: %w", p.Name, err)
		}
	}
	var out []*corev1.Pod
	for _, pod := range pods {
		if !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if p.Spec.NamespaceSelector != nil {
			ns := &corev1.Namespace{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Namespace}, ns); err != nil {
				return nil, fmt.Errorf("reading namespace %s: %w", pod.Namespace, err)
			}
			if !nsSel.Matches(labels.Set(ns.Labels)) {
				continue
			}
		}
		out = append(out, pod)
	}
	return out, nil
}

// ensureEvacuation returns the drain's Evacuation for the provider,
// creating it when the provider protects pods here (nil when it does not
// and none exists). One left by an earlier drain of the node is taken over.
func (r *Reconciler) ensureEvacuation(ctx context.Context, nd *v1alpha1.NodeDrain, provider string, mode v1alpha1.DrainMode, protects bool) (*v1alpha1.Evacuation, error) {
	name := EvacuationName(nd.Spec.NodeName, provider)
	ev := &v1alpha1.Evacuation{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, ev)
	want := v1alpha1.EvacuationSpec{NodeName: nd.Spec.NodeName, Provider: provider, Mode: mode,
		Desired: v1alpha1.DesiredEvacuate, DrainUID: string(nd.UID)}
	switch {
	case apierrors.IsNotFound(err):
		if !protects {
			return nil, nil
		}
		ev = &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: want}
		if err := controllerutil.SetOwnerReference(nd, ev, r.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Client.Create(ctx, ev); err != nil {
			return nil, fmt.Errorf("creating Evacuation %s: %w", name, err) // AlreadyExists: the cache is behind; the next pass reads it
		}
		return ev, nil
	case err != nil:
		return nil, fmt.Errorf("reading Evacuation %s: %w", name, err)
	case !equality.Semantic.DeepEqual(ev.Spec, want): // left by an earlier drain of the node: this drain takes it over
		patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
		ev.Spec = want
		ev.OwnerReferences = nil
		if err := controllerutil.SetOwnerReference(nd, ev, r.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Client.Patch(ctx, ev, patch); err != nil {
			return nil, err // a conflict is retried by the caller
		}
	}
	return ev, nil
}

// judge says whether an evacuation counts as done, why not, and how soon
// it turns stale if nothing changes. Only Completed for the current spec
// is done; silence past the provider's timeout is reported as such.
func judge(ev *v1alpha1.Evacuation, p *v1alpha1.EvacuationProvider, now time.Time) (done bool, why string, staleIn time.Duration) {
	timeout := DefaultProviderTimeout
	if p != nil && p.Spec.Timeout != nil {
		timeout = p.Spec.Timeout.Duration
	}
	st := ev.Status
	current := st.ObservedGeneration == ev.Generation && ev.Generation > 0
	if current && st.Phase == v1alpha1.EvacuationCompleted {
		return true, "Completed: " + st.Message, resync
	}
	last := ev.CreationTimestamp.Time
	if st.HeartbeatTime != nil && st.HeartbeatTime.After(last) {
		last = st.HeartbeatTime.Time
	}
	silent := now.Sub(last)
	if !current || st.Phase == "" {
		if silent >= timeout {
			return false, fmt.Sprintf("provider %s has not taken up the request for %s (timeout %s): is it running?", ev.Spec.Provider, silent.Round(time.Second), timeout), resync
		}
		return false, fmt.Sprintf("waiting for provider %s to take up the request", ev.Spec.Provider), timeout - silent
	}
	if silent >= timeout {
		return false, fmt.Sprintf("provider %s is stale: no heartbeat for %s (timeout %s); its last word: %s %s", ev.Spec.Provider,
			silent.Round(time.Second), timeout, st.Phase, st.Message), resync
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

func phaseOf(ev *v1alpha1.Evacuation) string {
	if ev.Status.Phase == "" || ev.Status.ObservedGeneration != ev.Generation {
		return string(v1alpha1.EvacuationPending)
	}
	return string(ev.Status.Phase)
}

// cancelEvacuations asks every provider that worked for a drain of this
// node to undo it (desired: Cancel), deletes each Evacuation once its
// provider reports Cancelled (or if it never took the request up), and
// reports whether all are gone.
func (r *Reconciler) cancelEvacuations(ctx context.Context, s *scope) (bool, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return false, fmt.Errorf("listing Evacuations: %w", err)
	}
	var waiting []string
	var hooks []v1alpha1.HookStatus
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName != s.drain.Spec.NodeName || !ev.DeletionTimestamp.IsZero() {
			continue
		}
		untouched := ev.Status.ObservedGeneration == 0 && ev.Status.HeartbeatTime == nil
		cancelled := ev.Status.Phase == v1alpha1.EvacuationCancelled && ev.Status.ObservedGeneration == ev.Generation &&
			ev.Spec.Desired == v1alpha1.DesiredCancel
		provider := &v1alpha1.EvacuationProvider{}
		perr := r.Client.Get(ctx, types.NamespacedName{Name: ev.Spec.Provider}, provider)
		gone := apierrors.IsNotFound(perr)
		if untouched || cancelled || gone {
			if gone && !untouched && !cancelled {
				r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, "ProviderGone", "Cancel",
					"EvacuationProvider %s is gone: nobody can undo Evacuation %s; deleting it", ev.Spec.Provider, ev.Name)
			}
			// The resourceVersion precondition: a provider that took it up since
			// our cache saw it is asked to cancel instead.
			err := r.Client.Delete(ctx, ev, ctrl.Preconditions{UID: &ev.UID, ResourceVersion: &ev.ResourceVersion})
			if apierrors.IsConflict(err) {
				waiting = append(waiting, ev.Name)
				continue
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deleting Evacuation %s: %w", ev.Name, err)
			}
			continue
		}
		if ev.Spec.Desired != v1alpha1.DesiredCancel {
			patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
			ev.Spec.Desired = v1alpha1.DesiredCancel
			if err := r.Client.Patch(ctx, ev, patch); apierrors.IsConflict(err) {
				waiting = append(waiting, ev.Name)
				continue
			} else if err != nil {
				return false, fmt.Errorf("cancelling Evacuation %s: %w", ev.Name, err)
			}
		}
		if perr != nil {
			provider = nil
		}
		_, why, _ := judge(ev, provider, s.now)
		waiting = append(waiting, ev.Name)
		hooks = append(hooks, v1alpha1.HookStatus{Name: ev.Name, Phase: phaseOf(ev), Message: truncate("cancelling: "+why, maxDetail)})
	}
	if len(waiting) > 0 {
		s.drain.Status.Hooks = hooks
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, ReasonCancelling,
			"waiting for the providers to undo their evacuations before restoring the node: "+strings.Join(waiting, ", "))
		return false, nil
	}
	return true, nil
}

// BlockerHTTPHook: a pod waits for its own HTTP evacuation hook.
const BlockerHTTPHook = "HTTPHook"

// hookTargets are the leaving pods whose HTTP hooks the policy allows, with
// their targets (or why the annotations cannot be used).
func (r *Reconciler) hookTargets(ctx context.Context, s *scope, pods []*corev1.Pod) ([]*corev1.Pod, []hook.Target, []error, error) {
	var outPods []*corev1.Pod
	var targets []hook.Target
	var errs []error
	if !s.policy.HTTPHooks {
		return nil, nil, nil, nil
	}
	mode := string(modeOf(s.drain))
	for _, pod := range pods {
		if !hook.Wants(pod) {
			continue
		}
		if s.policy.HookNamespaces != nil {
			ns := &corev1.Namespace{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Namespace}, ns); err != nil {
				return nil, nil, nil, fmt.Errorf("reading namespace %s: %w", pod.Namespace, err)
			}
			if !s.policy.HookNamespaces.Matches(labels.Set(ns.Labels)) {
				continue
			}
		}
		t, err := hook.TargetFor(pod, string(s.drain.UID), s.drain.Spec.NodeName, mode)
		outPods, targets, errs = append(outPods, pod), append(targets, t), append(errs, err)
	}
	return outPods, targets, errs, nil
}

// callHooks runs the HTTP hooks of the leaving pods: each pod is held until
// its own hook answers Completed for this drain.
func (r *Reconciler) callHooks(ctx context.Context, s *scope, leaving []*corev1.Pod) ([]v1alpha1.HookStatus, int, int, error) {
	pods, targets, errs, err := r.hookTargets(ctx, s, leaving)
	if err != nil {
		return nil, 0, 0, err
	}
	var hooks []v1alpha1.HookStatus
	done := 0
	for i, pod := range pods {
		name := "pod/" + pod.Namespace + "/" + pod.Name
		var phase, why string
		if errs[i] != nil {
			phase, why = string(v1alpha1.EvacuationPending), errs[i].Error()+"; the pod stays until it is fixed"
		} else {
			res := r.Hooks.Evacuate(targets[i])
			why = "HTTP hook " + targets[i].URL() + ": " + res.Describe()
			switch {
			case res.Done():
				done++
				hooks = append(hooks, v1alpha1.HookStatus{Name: name, Phase: string(v1alpha1.EvacuationCompleted), Message: truncate(why, maxDetail)})
				continue
			case res.State == hook.Failed:
				phase = string(v1alpha1.EvacuationFailed)
			case res.State == "":
				phase = string(v1alpha1.EvacuationPending)
			default:
				phase = string(v1alpha1.EvacuationInProgress)
			}
		}
		hooks = append(hooks, v1alpha1.HookStatus{Name: name, Phase: phase, Message: truncate(why, maxDetail)})
		if _, held := s.evac.holding[pod.UID]; !held { // a provider's hold is shown first; both must finish
			s.evac.holding[pod.UID] = v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: BlockerHTTPHook,
				Holder: "HTTP hook of pod " + pod.Namespace + "/" + pod.Name, Detail: truncate(why, maxDetail), Since: metav1.NewTime(s.now)}
		}
	}
	return hooks, len(pods), done, nil
}

// cancelHooks asks the hooks of the node's pods that took part in the drain
// to undo (DELETE) and reports whether every one acknowledged. A pod that
// has left cannot be asked, and holds nothing.
func (r *Reconciler) cancelHooks(ctx context.Context, s *scope) (bool, error) {
	started := map[string]bool{}
	for _, h := range s.drain.Status.Hooks {
		if strings.HasPrefix(h.Name, "pod/") && h.Phase != string(v1alpha1.EvacuationPending) {
			started[h.Name] = true
		}
	}
	if len(started) == 0 {
		return true, nil
	}
	pods, err := r.podsOnNode(ctx, s.drain.Spec.NodeName)
	if err != nil {
		return false, err
	}
	var hooks []v1alpha1.HookStatus
	for _, pod := range pods {
		name := "pod/" + pod.Namespace + "/" + pod.Name
		if !started[name] || !hook.Wants(pod) { // started under the policy of then: cancelled whatever it says now
			continue
		}
		t, err := hook.TargetFor(pod, string(s.drain.UID), s.drain.Spec.NodeName, string(modeOf(s.drain)))
		if err != nil {
			continue // it cannot be called; it was never started with these annotations
		}
		res, acknowledged := r.Hooks.Cancel(t)
		if acknowledged {
			r.Hooks.Forget(pod.UID)
			continue
		}
		hooks = append(hooks, v1alpha1.HookStatus{Name: name, Phase: string(v1alpha1.EvacuationInProgress),
			Message: truncate("cancelling: "+res.Describe(), maxDetail)})
	}
	if len(hooks) > 0 {
		s.drain.Status.Hooks = hooks
		s.setCondition(v1alpha1.ConditionEvacuated, metav1.ConditionFalse, ReasonCancelling,
			fmt.Sprintf("waiting for %d HTTP hook(s) to acknowledge the cancel before restoring the node", len(hooks)))
		return false, nil
	}
	return true, nil
}
