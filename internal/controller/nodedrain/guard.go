package nodedrain

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
)

// guardTimeout bounds the reads of the check before an eviction.
const guardTimeout = 10 * time.Second

// mayEvict is the last check before an eviction call, made by the eviction
// queue's worker for every attempt: a pod queued in an earlier pass may have
// become held since (a provider registered mid-drain, the drain's mode went
// up, a hook appeared, the drain was cancelled). It reads the cache as it is
// now and refuses the eviction when the drain is being undone, when an
// Evacuation of this drain protects the pod and is not Completed (nor
// released), when a provider that takes part in the drain selects the pod
// but has not been asked for it yet, or when the pod's HTTP hook has not
// answered Completed. A refused pod leaves the queue; the drain's next pass
// holds it and queues it again once it may go.
func (r *Reconciler) mayEvict(req eviction.Request) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	why, err := r.heldNow(ctx, req)
	if err != nil {
		return false, "cannot check the pod's holds: " + err.Error()
	}
	return why == "", why
}

// heldNow says why the pod may not be evicted now ("" when it may).
func (r *Reconciler) heldNow(ctx context.Context, req eviction.Request) (string, error) {
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: req.Node}, nd); err != nil {
		return "", fmt.Errorf("reading NodeDrain %s: %w", req.Node, err)
	}
	if !nd.DeletionTimestamp.IsZero() || len(nd.Spec.Requesters) == 0 {
		return "the drain is being undone", nil
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.Pod, pod); err != nil || pod.UID != req.UID {
		return "", nil // gone, or another pod: the UID precondition answers
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node); err != nil {
		return "", fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	evacs, err := r.evacuationsOf(ctx, nd)
	if err != nil {
		return "", err
	}
	providers := &v1alpha1.EvacuationProviderList{}
	if err := r.Client.List(ctx, providers); err != nil {
		return "", fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	byName := map[string]*v1alpha1.EvacuationProvider{}
	for i := range providers.Items {
		p := &providers.Items[i]
		byName[p.Name] = p
		if why, err := r.notAskedYet(ctx, nd, node, p, pod, evacs[p.Name]); why != "" || err != nil {
			return why, err
		}
	}
	for _, ev := range evacs {
		if !ours(ev, nd, node) || stageOf(ev) != v1alpha1.StageBeforeEviction || ev.Spec.Release != nil ||
			!slices.ContainsFunc(ev.Spec.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) }) {
			continue
		}
		if !ev.DeletionTimestamp.IsZero() {
			return fmt.Sprintf("Evacuation %s protects it and is being deleted (its provider is asked to cancel it first)", ev.Name), nil
		}
		if done, _, _ := judge(ev, byName[ev.Spec.Provider], r.Clock.Now()); !done {
			return fmt.Sprintf("Evacuation %s protects it and is not Completed", ev.Name), nil
		}
	}
	return r.hookNotDone(ctx, nd, node, pod)
}

// notAskedYet: a provider that takes part in the drain selects the pod, but
// its Evacuation for this drain does not record the pod yet.
func (r *Reconciler) notAskedYet(ctx context.Context, nd *v1alpha1.NodeDrain, node *corev1.Node, p *v1alpha1.EvacuationProvider, pod *corev1.Pod, ev *v1alpha1.Evacuation) (string, error) {
	if !p.DeletionTimestamp.IsZero() || !takesPart(p, modeOf(nd)) || providerStage(p) != v1alpha1.StageBeforeEviction {
		return "", nil
	}
	if ev != nil && ours(ev, nd, node) &&
		slices.ContainsFunc(ev.Spec.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) }) {
		return "", nil // the Evacuation's own state decides
	}
	ok, err := r.selects(ctx, p, pod)
	if err != nil || !ok {
		return "", err
	}
	return fmt.Sprintf("EvacuationProvider %s protects it and has not been asked for it yet", p.Name), nil
}

// hookNotDone: the pod has an HTTP hook the drain's policy calls, and it has
// not answered Completed for this drain.
func (r *Reconciler) hookNotDone(ctx context.Context, nd *v1alpha1.NodeDrain, node *corev1.Node, pod *corev1.Pod) (string, error) {
	if !hook.Wants(pod) {
		return "", nil
	}
	p, err := policy.Resolve(ctx, r.Client, nd.Spec.PolicyName, node)
	if err != nil {
		return "", err
	}
	if wants, err := r.hookAllowed(ctx, p, pod); err != nil || !wants {
		return "", err
	}
	t, err := hook.TargetFor(pod, hookRun(nd), r.AllowLoopbackHooks)
	if hook.IsRefused(err) {
		return "its HTTP evacuation hook is at an address vacate never calls", nil
	}
	if err != nil || !r.Hooks.Done(t) {
		return "its HTTP evacuation hook has not answered Completed for this run", nil
	}
	return "", nil
}

// hookAllowed reports whether the policy calls the pod's HTTP hook (see
// policy.CallsHook, which vacate plan shares).
func (r *Reconciler) hookAllowed(ctx context.Context, p policy.Policy, pod *corev1.Pod) (bool, error) {
	ok, _, err := p.CallsHook(pod, r.namespaceLabels(ctx))
	return ok, err
}
