package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
// (s.requestWaits, which the evict stage waits on with its own).
func (r *Reconciler) requestEvictions(ctx context.Context, s *scope) (reconcile.Result, error) {
	s.requested, s.requestWaits = nil, nil
	var asking []podStep
	for _, p := range s.steps {
		if p.step == drain.StepRequest {
			asking = append(asking, p)
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

// askEviction asks for the pod's eviction with the drain's EvictionRequest, unless it
// already asks, when its PDBs' budget has room; it records what the pod's
// Eviction says (s.requested). It reports whether the pod waits on its PDBs'
// budget.
func (r *Reconciler) askEviction(ctx context.Context, s *scope, p podStep, budget pdbBudget) (bool, error) {
	req := &lifecyclev1alpha1.EvictionRequest{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Pod.Namespace, Name: er.DrainRequestName(p.Pod)}, req)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading the EvictionRequest of pod %s: %w", p.key, err)
	}
	found := err == nil
	asks := found && er.Asks(req, p.Pod)
	if !asks && !budget.take(p.PDBs) {
		return true, nil
	}
	reserve := budget.request(s, p.Decision)
	if !asks {
		if err := r.putRequest(ctx, s, p.Pod, req, found); err != nil {
			return false, err
		}
	}
	reserve.For = eviction.ForEvictionRequests
	r.Evictions.Reserve(reserve) // again after a restart: the queue forgot
	ev, err := r.evictionOf(ctx, p.Pod)
	if err != nil {
		return false, err
	}
	if s.requested == nil {
		s.requested = map[types.UID]v1alpha1.Blocker{}
	}
	s.requested[p.Pod.UID] = er.Blocker(p.Pod, ev, s.now)
	return false, nil
}

// putRequest creates the drain's request for the pod, or turns the one
// found (withdrawn by an undo, or left by an earlier drain, or made for an
// earlier pod of the name) back to asking, owned by this drain.
func (r *Reconciler) putRequest(ctx context.Context, s *scope, pod *corev1.Pod, found *lifecyclev1alpha1.EvictionRequest, exists bool) error {
	owner := metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: s.drain.Name, UID: s.drain.UID}
	want := er.DrainRequest(pod, owner)
	if !exists {
		err := r.Client.Create(ctx, want)
		if err == nil {
			s.log.Info("asked for a pod's eviction with an EvictionRequest", "pod", pod.Namespace+"/"+pod.Name, "request", want.Name)
		}
		if apierrors.IsAlreadyExists(err) {
			return nil // the next pass reads it
		}
		return err
	}
	if t := found.Spec.Target.Pod; t == nil || t.UID != pod.UID || !found.DeletionTimestamp.IsZero() {
		// An earlier pod's (the target is immutable), or on its way out.
		if err := r.Client.Delete(ctx, found, client.Preconditions{UID: ptr.To(found.UID)}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil // the next pass creates it
	}
	patch := client.MergeFromWithOptions(found.DeepCopy(), client.MergeFromWithOptimisticLock{})
	found.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentEviction
	found.Labels = want.Labels
	found.OwnerReferences = want.OwnerReferences
	return r.Client.Patch(ctx, found, patch)
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

// withdrawRequests withdraws the drain's EvictionRequests of pods still on
// the node (intent Withdrawn: their coordinator cancels their Evictions,
// the responders undo, the pods stay) and reports whether every one's
// Eviction is over (cancelled, ended, or gone), so that the node is given
// back after its responders stopped, within timeouts.cancel. When the node
// goes away its requests stay: what the responders moved stays moved.
func (r *Reconciler) withdrawRequests(ctx context.Context, s *scope, u undoing) (bool, error) {
	if !r.Requests || u.nodeGoing {
		return true, nil
	}
	list := &lifecyclev1alpha1.EvictionRequestList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{er.LabelDrain: s.drain.Name}); err != nil {
		return false, fmt.Errorf("listing the drain's EvictionRequests: %w", err)
	}
	over := true
	for i := range list.Items {
		req := &list.Items[i]
		pod := &corev1.Pod{}
		t := req.Spec.Target.Pod
		if req.Spec.Requester != er.DrainRequester || t == nil {
			continue
		}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: t.Name}, pod); apierrors.IsNotFound(err) || err == nil && pod.UID != t.UID {
			continue // the pod left: nothing to withdraw
		} else if err != nil {
			return false, err
		}
		r.Evictions.Unreserve(pod.UID)
		if req.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction {
			patch := client.MergeFromWithOptions(req.DeepCopy(), client.MergeFromWithOptimisticLock{})
			req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
			if err := r.Client.Patch(ctx, req, patch); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("withdrawing EvictionRequest %s/%s: %w", req.Namespace, req.Name, err)
			}
			s.log.Info("withdrew an EvictionRequest", "pod", req.Namespace+"/"+t.Name, "request", req.Name)
		}
		ev, err := r.evictionOf(ctx, pod)
		if err != nil {
			return false, err
		}
		if ev != nil && !er.Final(ev) {
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
