// Package drainpolicy reports on each DrainPolicy how many nodes it governs,
// whether its nodeSelector overlaps another policy's, and, for a policy with
// onTimeout: ForceDelete, whether the controller may delete pods at all.
// Overlaps are only reported here: the drains of the nodes involved wait
// (AmbiguousPolicy) until a person fixes the selectors; nothing is resolved
// silently.
package drainpolicy

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/schedule"
)

const (
	// forceDeleteRecheck is how often the right is asked again for a
	// policy that uses it, so a binding made or removed later shows.
	forceDeleteRecheck  = time.Minute
	maxNodesInMessage   = 5
	maxPolicyInMessages = 5
)

// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=selfsubjectaccessreviews,verbs=create

// Reconciler writes status.nodes and the Overlapping and Valid conditions.
type Reconciler struct {
	Client client.Client
}

// Reconcile recomputes one policy's status from the nodes and the other
// policies.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	dp := &v1alpha1.DrainPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, dp); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	before := dp.DeepCopy()
	r.report(dp, policies.Items, nodes.Items)
	var result reconcile.Result
	if usesForceDelete(dp) {
		allowed, err := r.mayDeletePods(ctx)
		if err != nil {
			return reconcile.Result{}, err
		}
		reportForceDelete(dp, allowed)
		result.RequeueAfter = forceDeleteRecheck
	} else {
		meta.RemoveStatusCondition(&dp.Status.Conditions, v1alpha1.ConditionForceDeletePermitted)
	}
	if equality.Semantic.DeepEqual(before.Status, dp.Status) {
		return result, nil
	}
	err := r.Client.Status().Patch(ctx, dp, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // a newer copy is on its way
	}
	return result, err
}

// usesForceDelete: the policy deletes pods left at a timeout.
func usesForceDelete(dp *v1alpha1.DrainPolicy) bool {
	return dp.Spec.Timeouts.OnTimeout == "ForceDelete"
}

// mayDeletePods asks the API server (a SelfSubjectAccessReview, which every
// authenticated user may create) whether the controller may delete pods in
// every namespace.
func (r *Reconciler) mayDeletePods(ctx context.Context) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods"},
	}}
	if err := r.Client.Create(ctx, review); err != nil {
		return false, fmt.Errorf("asking whether the controller may delete pods: %w", err)
	}
	return review.Status.Allowed, nil
}

// reportForceDelete sets ForceDeletePermitted on a policy that uses
// ForceDelete.
func reportForceDelete(dp *v1alpha1.DrainPolicy, allowed bool) {
	c := metav1.Condition{Type: v1alpha1.ConditionForceDeletePermitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonForceDeletePermitted,
		Message: "the controller may delete pods, as onTimeout: ForceDelete needs", ObservedGeneration: dp.Generation}
	if !allowed {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonMissingForceDeleteRole
		c.Message = "onTimeout: ForceDelete, but the controller may not delete pods: a drain that times out under this policy " +
			"fails (ForceDeleteForbidden) instead; bind the ClusterRole vacate-controller-force-delete to the controller " +
			"('vacate manifests force-delete | kubectl apply -f -')"
	}
	condition.Set(&dp.Status.Conditions, c)
}

// report computes the status in memory.
func (r *Reconciler) report(dp *v1alpha1.DrainPolicy, policies []v1alpha1.DrainPolicy, nodes []corev1.Node) {
	st := &dp.Status
	st.ObservedGeneration = dp.Generation
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		condition.Set(&st.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: dp.Generation})
	}
	var own labels.Selector
	if dp.Spec.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(dp.Spec.NodeSelector)
		if err != nil {
			set(v1alpha1.ConditionValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidNodeSelector, fmt.Sprintf("spec.nodeSelector: %v; drains that this policy might govern wait until it is fixed", err))
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionOverlapping)
			st.Nodes = 0
			return
		}
		own = sel
	}
	if _, err := schedule.ParseSchedule(dp.Spec.Schedule); err != nil {
		set(v1alpha1.ConditionValid, metav1.ConditionFalse, schedule.InvalidSchedule, fmt.Sprintf("spec.%v; no drain under this policy is admitted until it is fixed", err))
	} else {
		set(v1alpha1.ConditionValid, metav1.ConditionTrue, v1alpha1.ReasonValid, "the nodeSelector and schedule are valid")
	}

	governed := int32(0)
	shared := map[string][]string{} // other policy -> nodes both select
	for i := range nodes {
		n := &nodes[i]
		if policy.Governs(dp, n.Labels, policies) {
			governed++
		}
		if own == nil || dp.Name == v1alpha1.DefaultPolicyName || !own.Matches(labels.Set(n.Labels)) {
			continue
		}
		for j := range policies {
			other := &policies[j]
			if other.Name != dp.Name && other.Name != v1alpha1.DefaultPolicyName && policy.Governs(other, n.Labels, nil) {
				shared[other.Name] = append(shared[other.Name], n.Name)
			}
		}
	}
	st.Nodes = governed
	if len(shared) == 0 {
		set(v1alpha1.ConditionOverlapping, metav1.ConditionFalse, v1alpha1.ReasonNoOverlap, "no other DrainPolicy selects the nodes this one selects")
		return
	}
	set(v1alpha1.ConditionOverlapping, metav1.ConditionTrue, v1alpha1.ReasonSelectorsOverlap, overlapMessage(shared))
}

// overlapMessage names the other policies and some of the shared nodes,
// sorted, so the message changes only when the overlap does.
func overlapMessage(shared map[string][]string) string {
	others := make([]string, 0, len(shared))
	for name := range shared {
		others = append(others, name)
	}
	sort.Strings(others)
	parts := make([]string, 0, len(others))
	for i, name := range others {
		if i == maxPolicyInMessages {
			parts = append(parts, fmt.Sprintf("and %d more policies", len(others)-i))
			break
		}
		nodes := shared[name]
		sort.Strings(nodes)
		shown := nodes
		if len(shown) > maxNodesInMessage {
			shown = shown[:maxNodesInMessage]
		}
		p := fmt.Sprintf("DrainPolicy %s also selects %d node(s): %s", name, len(nodes), strings.Join(shown, ", "))
		if len(nodes) > len(shown) {
			p += fmt.Sprintf(" and %d more", len(nodes)-len(shown))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ") + "; drains of these nodes wait until exactly one policy selects them"
}

// SetupWithManager watches the policies and the nodes' labels; any change
// can change every policy's status, so it wakes all of them.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("drainpolicy").
		For(&v1alpha1.DrainPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.DrainPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allPolicies), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

func (r *Reconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, dp := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&dp)})
	}
	return reqs
}
