package nodedrain

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
)

// guardTimeout bounds the reads of the check before an eviction.
const guardTimeout = 10 * time.Second

// MayEvict is the last check before an eviction call, made by the eviction
// queue's worker for every attempt: a pod queued in an earlier pass may have
// become held since (a provider registered mid-drain, the drain's mode went
// up, a hook appeared, the drain was cancelled). It reads the cache as it is
// now and asks holds, the model the pass holds pods with, about the pod. A
// refused pod leaves the queue; the drain's next pass holds it and queues
// it again once it may go.
func (r *Reconciler) MayEvict(req eviction.Request) (bool, string) {
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
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.Pod, pod); err != nil || pod.UID != req.UID {
		if nd.Requested() {
			return "", nil // gone, or another pod: the UID precondition answers
		}
		pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: req.UID}}
	}
	in := hold.Input{Drain: nd, OnNode: map[types.UID]*corev1.Pod{pod.UID: pod}, Leaving: []*corev1.Pod{pod}, Now: r.Clock.Now()}
	if nd.Requested() { // one being undone holds every pod: nothing more to read
		if err := r.readHoldInput(ctx, &in, pod); err != nil {
			return "", err
		}
	}
	h, err := hold.Compute(in)
	if err != nil {
		return "", err
	}
	if b, held := h.Of(pod); held {
		return fmt.Sprintf("held by %s: %s", b.Holder, b.Detail), nil
	}
	return "", nil
}

// readHoldInput reads from the cache what holds need to judge one pod of
// the drain: its node, Evacuations, the providers, and its HTTP hook.
func (r *Reconciler) readHoldInput(ctx context.Context, in *hold.Input, pod *corev1.Pod) error {
	nd := in.Drain
	in.Node = &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, in.Node); err != nil {
		return fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	evacs, err := r.evacuationsOf(ctx, nd)
	if err != nil {
		return err
	}
	list := &v1alpha1.EvacuationProviderList{}
	if err := r.Client.List(ctx, list); err != nil {
		return fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	in.Evacuations, in.Providers, in.Selects = evacs, itemsOf(list), r.selector(ctx)
	in.Hooks, err = r.hookStateNow(ctx, nd, in.Node, pod)
	return err
}

// hookStateNow is the pod's HTTP hook as the prober knows it, if the
// drain's policy calls it: refused, unusable, or Completed for this run or
// not.
func (r *Reconciler) hookStateNow(ctx context.Context, nd *v1alpha1.NodeDrain, node *corev1.Node, pod *corev1.Pod) (map[types.UID]hold.HookState, error) {
	if !hook.Wants(pod) {
		return nil, nil
	}
	pol, err := policy.Resolve(ctx, r.Client, nd.Spec.PolicyName, node)
	if err != nil {
		return nil, err
	}
	pods, targets, errs, err := r.hookTargets(ctx, pol, nd, []*corev1.Pod{pod})
	if err != nil || len(pods) == 0 {
		return nil, err
	}
	st := hold.HookState{Err: errs[0]}
	switch {
	case st.Err != nil:
		st.Detail = hold.HookErrorDetail(st.Err)
	case r.Hooks.Done(targets[0]):
		st.Done = true
	default:
		st.Detail = "HTTP hook " + targets[0].URL() + ": it has not answered Completed for this run"
	}
	return map[types.UID]hold.HookState{pod.UID: st}, nil
}
