package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// +kubebuilder:rbac:groups=lifecycle.k8s.io,resources=evictionrequests,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=lifecycle.k8s.io,resources=evictions,verbs=get;list;watch

// A drain as a requester of Kubernetes' EvictionRequest API. Where vacate
// requests through it (Reconciler.Requests), a pod that declares eviction
// responders leaves by an EvictionRequest of the drain's (step Request,
// drain.Next) instead of an eviction of its own: its responders (vacate's
// HTTP hook among them, vacate.dev/evacuation) move its data in their
// turns, then the coordinator evicts it within its PDBs. The drain asks
// within its PDBs' budgets, as it queues evictions, and reserves the budget
// it took in the eviction queue (For eviction.ForEvictionRequests: the
// coordinator's eviction takes it over), so that one PDB's pods are not all
// asked for at once. Its status follows the pod's Eviction (the responder
// that has the turn, and its message); its undo withdraws what it asked.

// requestEvictions is the stage of the pods whose step is Request: within
// their PDBs' budgets (one pass at a time computes them, as the evict stage
// does), it asks for their evictions (askEviction), and records what their
// Evictions say (s.requested) and the PDBs whose budgets they wait on
// (s.requestWaits, which the evict stage waits on with its own). A pod the
// drain asked for whose step is another now (an evacuation holds it, it
// waits for its surge) has the request withdrawn: it must not go yet.
func (r *Reconciler) requestEvictions(ctx context.Context, s *scope) (reconcile.Result, error) {
	s.requested, s.requestWaits = map[types.UID]v1alpha1.Blocker{}, nil
	var asking []podStep
	for _, p := range s.steps {
		switch {
		case p.step == drain.StepRequest:
			asking = append(asking, p)
		case r.Requests && er.Declares(p.Pod):
			if err := r.withdrawPod(ctx, s, p.Pod); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	if len(asking) == 0 {
		return reconcile.Result{}, nil
	}
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	budget := r.pdbBudgets(ctx, *s.plan)
	for _, p := range asking {
		waits, err := r.askEviction(ctx, s, p, budget)
		if err != nil {
			return reconcile.Result{}, err
		}
		if waits {
			s.requestWaits = append(s.requestWaits, p.PDBs...)
		}
	}
	return reconcile.Result{}, nil
}

// askEviction asks for the pod's eviction with the drain's EvictionRequest,
// unless one of the drain's asks already, when its PDBs' budget has room
// (the pod's own reservation is its room); it records what the pod's
// Eviction says (s.requested), or why it could not ask. It reports whether
// the pod waits on its PDBs' budget.
func (r *Reconciler) askEviction(ctx context.Context, s *scope, p podStep, budget pdbBudget) (bool, error) {
	req, err := r.drainRequestOf(ctx, p.Pod)
	if err != nil {
		return false, err
	}
	asks := req != nil && req.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction
	state := r.Evictions.State(p.Pod.UID)
	if !asks && !state.Reserved && !budget.take(p.PDBs) {
		return true, nil
	}
	if !asks {
		if err := r.putRequest(ctx, s, p.Pod, req); err != nil {
			s.requested[p.Pod.UID] = er.AskFailed(p.Pod, err, s.now)
			return false, nil // the next pass tries again; the node's other pods go on
		}
	}
	if !state.Evicted && !state.Pending {
		reserve := budget.request(s, p.Decision)
		reserve.For = eviction.ForEvictionRequests
		r.Evictions.Reserve(reserve) // again after a restart: the queue forgot
	}
	ev, err := r.evictionOf(ctx, p.Pod)
	if err != nil {
		return false, err
	}
	s.requested[p.Pod.UID] = er.Blocker(p.Pod, ev, s.now)
	return false, nil
}

// drainRequestOf is the drains' EvictionRequest for the pod (requester
// vacate.dev/drain, which only vacate-controller may write; this pod, by
// UID), one that asks first; nil if there is none. Its name proves
// nothing: anyone who may create EvictionRequests in the namespace could
// take it first.
func (r *Reconciler) drainRequestOf(ctx context.Context, pod *corev1.Pod) (*lifecyclev1alpha1.EvictionRequest, error) {
	list := &lifecyclev1alpha1.EvictionRequestList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pod.Namespace), client.MatchingFields{index.EvictionTarget: pod.Name}); err != nil {
		return nil, fmt.Errorf("reading the EvictionRequests of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	var found *lifecyclev1alpha1.EvictionRequest
	for i := range list.Items {
		req := &list.Items[i]
		if !er.Ours(req, pod) {
			continue
		}
		if found == nil || req.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction {
			found = req
		}
	}
	return found, nil
}

// putRequest asks for the pod: it turns the drains' request found
// (withdrawn by an undo, or left by an earlier drain of the node) back to
// asking, owned by this drain, or creates one. A name taken by someone
// else's request gets a generated one.
func (r *Reconciler) putRequest(ctx context.Context, s *scope, pod *corev1.Pod, found *lifecyclev1alpha1.EvictionRequest) error {
	owner := metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: s.drain.Name, UID: s.drain.UID}
	want := er.DrainRequest(pod, owner)
	if found != nil {
		patch := client.MergeFromWithOptions(found.DeepCopy(), client.MergeFromWithOptimisticLock{})
		found.Spec.Intent, found.OwnerReferences = lifecyclev1alpha1.EvictionRequestIntentEviction, want.OwnerReferences
		if err := r.Client.Patch(ctx, found, patch); err != nil {
			return fmt.Errorf("asking again with EvictionRequest %s/%s: %w", found.Namespace, found.Name, err)
		}
		return nil
	}
	err := r.Client.Create(ctx, want)
	if apierrors.IsAlreadyExists(err) {
		taken := &lifecyclev1alpha1.EvictionRequest{}
		if gerr := r.fresh().Get(ctx, client.ObjectKeyFromObject(want), taken); gerr != nil || er.Ours(taken, pod) {
			return nil // ours: the cache is behind, the next pass reads it
		}
		want.GenerateName, want.Name = want.Name+"-", ""
		err = r.Client.Create(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("creating EvictionRequest %s/%s: %w", want.Namespace, want.Name+want.GenerateName, err)
	}
	s.log.Info("asked for a pod's eviction with an EvictionRequest", "pod", pod.Namespace+"/"+pod.Name, "request", want.Name)
	return nil
}

// evictionOf is the pod's Eviction, or nil.
func (r *Reconciler) evictionOf(ctx context.Context, pod *corev1.Pod) (*lifecyclev1alpha1.Eviction, error) {
	list := &lifecyclev1alpha1.EvictionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pod.Namespace), client.MatchingFields{index.EvictionTarget: pod.Name}); err != nil {
		return nil, fmt.Errorf("reading the Eviction of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	for i := range list.Items {
		if t := list.Items[i].Spec.Target.Pod; t != nil && t.UID == pod.UID {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// withdrawPod withdraws the drains' request for the pod, if one asks, and
// drops the budget it reserved.
func (r *Reconciler) withdrawPod(ctx context.Context, s *scope, pod *corev1.Pod) error {
	req, err := r.drainRequestOf(ctx, pod)
	if err != nil || req == nil || req.Spec.Intent != lifecyclev1alpha1.EvictionRequestIntentEviction {
		return err
	}
	r.Evictions.Unreserve(pod.UID)
	patch := client.MergeFromWithOptions(req.DeepCopy(), client.MergeFromWithOptimisticLock{})
	req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
	if err := r.Client.Patch(ctx, req, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("withdrawing EvictionRequest %s/%s: %w", req.Namespace, req.Name, err)
	}
	s.log.Info("withdrew an EvictionRequest", "pod", pod.Namespace+"/"+pod.Name, "request", req.Name)
	return nil
}

// requestedOnNode are the pods of the drain's node that a drains' request
// names, with the request that asks (or the last): from the cache.
func (r *Reconciler) requestedOnNode(ctx context.Context, s *scope) ([]*corev1.Pod, error) {
	if !r.Requests {
		return nil, nil
	}
	list := &lifecyclev1alpha1.EvictionRequestList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing EvictionRequests: %w", err)
	}
	seen := map[types.UID]bool{}
	var out []*corev1.Pod
	for i := range list.Items {
		req := &list.Items[i]
		t := req.Spec.Target.Pod
		if req.Spec.Requester != er.DrainRequester || t == nil || seen[t.UID] {
			continue
		}
		pod := &corev1.Pod{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: t.Name}, pod); apierrors.IsNotFound(err) {
			continue // the pod left: nothing to withdraw
		} else if err != nil {
			return nil, err
		}
		if pod.UID == t.UID && pod.Spec.NodeName == s.drain.Spec.NodeName {
			seen[t.UID] = true
			out = append(out, pod)
		}
	}
	return out, nil
}

// withdrawAll withdraws the drains' requests for the pods of the node (the
// drain failed, is held, or is being undone).
func (r *Reconciler) withdrawAll(ctx context.Context, s *scope) ([]*corev1.Pod, error) {
	pods, err := r.requestedOnNode(ctx, s)
	if err != nil {
		return nil, err
	}
	for _, pod := range pods {
		if err := r.withdrawPod(ctx, s, pod); err != nil {
			return nil, err
		}
	}
	return pods, nil
}

// withdrawRequests withdraws the drains' requests for the pods of the node
// (intent Withdrawn: their coordinator cancels their Evictions, the
// responders undo, the pods stay) and reports whether every one's Eviction
// is over for the drain: cancelled, ended or gone, or still wanted by
// another requester (not the drain's to wait for), so that the node is
// given back after the responders stopped, within timeouts.cancel. When
// the node goes away its requests stay: what the responders moved stays
// moved.
func (r *Reconciler) withdrawRequests(ctx context.Context, s *scope, u undoing) (bool, error) {
	if !r.Requests || u.nodeGoing {
		return true, nil
	}
	pods, err := r.withdrawAll(ctx, s)
	if err != nil {
		return false, err
	}
	over := true
	for _, pod := range pods {
		ev, err := r.evictionOf(ctx, pod)
		if err != nil {
			return false, err
		}
		if ev != nil && !er.Final(ev) && !er.WantedByOthers(ev, er.DrainRequester) {
			over = false
		}
	}
	if !over && u.expired {
		r.Events.Eventf(s.drain, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
			"the Evictions of the pods the drain asked for were not cancelled within %s (timeouts.cancel); giving the node back without waiting", u.limit)
		return true, nil
	}
	return over, nil
}
