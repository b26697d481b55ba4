// Package trigger turns the signals a cluster already produces into drain
// requests. Each trigger is a requester of its own on the node's NodeDrain,
// added and withdrawn on its own (server-side apply, one field manager per
// trigger), so a drain is undone only when its last requester, trigger or
// person, leaves:
//
//   - "taint": the taint vacate.dev/drain, any effect (policy triggers.taint);
//   - "cordon": the node is unschedulable and vacate did not cordon it
//     (triggers.onUnschedulable: Drain);
//   - "external:<key>": a taint of triggers.externalTaints, by default the
//     cluster autoscaler's and Karpenter's;
//   - "delete": the node is being deleted (triggers.onNodeDelete: Drain). The
//     finalizer vacate.dev/drain on governed nodes holds a deleted node until
//     its drain is Drained, then is released; under Orphan it is removed.
package trigger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/nodedrain"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/requests"
)

// Fixed names.
const (
	// TaintKey requests a drain of the node it is on.
	TaintKey = "vacate.dev/drain"
	// Requester names of the triggers.
	RequesterTaint    = "taint"
	RequesterCordon   = "cordon"
	RequesterDelete   = "delete"
	requesterExternal = "external:"
	// FinalizerDrain holds a deleted node until vacate drained it.
	FinalizerDrain = "vacate.dev/drain"
)

// IsTrigger reports whether a requester name is one of the triggers'.
func IsTrigger(name string) bool {
	return name == RequesterTaint || name == RequesterCordon || name == RequesterDelete || strings.HasPrefix(name, requesterExternal)
}

// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// Reconciler keeps the triggers' requester entries in step with the nodes.
type Reconciler struct {
	Client client.Client
}

// Wanted returns the trigger requesters a node calls for under the
// policy's triggers, sorted by name.
func Wanted(node *corev1.Node, t policy.Triggers) []v1alpha1.Requester {
	var out []v1alpha1.Requester
	for _, taint := range node.Spec.Taints {
		switch {
		case taint.Key == TaintKey && t.Taint:
			out = append(out, v1alpha1.Requester{Name: RequesterTaint, Reason: "taint " + TaintKey + " (" + string(taint.Effect) + ")"})
		case slices.Contains(t.ExternalTaints, taint.Key):
			out = append(out, v1alpha1.Requester{Name: requesterExternal + taint.Key, Reason: "taint " + taint.Key + " from outside vacate"})
		}
	}
	if t.OnNodeDelete && !node.DeletionTimestamp.IsZero() && controllerutil.ContainsFinalizer(node, FinalizerDrain) {
		out = append(out, v1alpha1.Requester{Name: RequesterDelete, Reason: "the node is being deleted (policy triggers.onNodeDelete: Drain)"})
	}
	if t.OnUnschedulable && node.Spec.Unschedulable && node.Annotations[nodedrain.AnnotationCordonedBy] == "" {
		out = append(out, v1alpha1.Requester{Name: RequesterCordon, Reason: "the node was cordoned (policy triggers.onUnschedulable: Drain)"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return dedupe(out)
}

// Reconcile adds the entries of the triggers that hold and withdraws those
// that no longer do. Under an ambiguous policy it changes nothing.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	node := &corev1.Node{}
	err := r.Client.Get(ctx, req.NamespacedName, node)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	var wanted []v1alpha1.Requester
	onDelete, nodeExists := false, err == nil
	if err == nil {
		p, err := policy.Resolve(ctx, r.Client, "", node)
		if policy.IsAmbiguous(err) {
			log.Info("leaving the triggers of the node as they are: its policy is ambiguous", "node", req.Name, "reason", err.Error())
			return reconcile.Result{}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		wanted = Wanted(node, p.Triggers)
		onDelete = p.Triggers.OnNodeDelete
	}
	nd := &v1alpha1.NodeDrain{}
	err = r.Client.Get(ctx, types.NamespacedName{Name: req.Name}, nd)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if exists && !nd.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil // being undone; the delete event brings us back
	}
	for _, w := range wanted {
		if exists && requests.Index(nd, w.Name) >= 0 {
			continue
		}
		var mode v1alpha1.DrainMode
		var policyName string
		if w.Name == RequesterDelete {
			mode = v1alpha1.ModeDecommission // the node goes away
		}
		if exists { // restate the drain's own settings, never change them
			mode, policyName = nd.Spec.Mode, nd.Spec.PolicyName
		}
		log.Info("requesting drain for a trigger", "node", req.Name, "requester", w.Name)
		if err := requests.Apply(ctx, r.Client, req.Name, w, mode, policyName); err != nil {
			return reconcile.Result{}, fmt.Errorf("requesting the drain of %s for %s: %w", req.Name, w.Name, err)
		}
	}
	if nodeExists {
		if err := r.nodeFinalizer(ctx, node, onDelete, exists && nd.Status.Phase == v1alpha1.PhaseDrained); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !exists {
		return reconcile.Result{}, nil
	}
	for _, have := range nd.Spec.Requesters {
		if !IsTrigger(have.Name) || slices.ContainsFunc(wanted, func(w v1alpha1.Requester) bool { return w.Name == have.Name }) {
			continue
		}
		log.Info("withdrawing a trigger's drain request", "node", req.Name, "requester", have.Name)
		after, err := requests.Withdraw(ctx, r.Client, nd.DeepCopy(), have.Name)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("withdrawing %s from NodeDrain %s: %w", have.Name, req.Name, err)
		}
		if _, err := requests.DeleteIfIdle(ctx, r.Client, after); err != nil {
			return reconcile.Result{}, fmt.Errorf("deleting idle NodeDrain %s: %w", req.Name, err)
		}
		nd = after
	}
	return reconcile.Result{}, nil
}

// nodeFinalizer keeps vacate.dev/drain on the nodes whose policy drains
// them on deletion, and releases it from a deleted node once its drain is
// Drained, or at once when the policy no longer asks for it (Orphan).
func (r *Reconciler) nodeFinalizer(ctx context.Context, node *corev1.Node, onDelete, drained bool) error {
	has := controllerutil.ContainsFinalizer(node, FinalizerDrain)
	deleting := !node.DeletionTimestamp.IsZero()
	var change func(client.Object, string) bool
	switch {
	case onDelete && !deleting && !has:
		change = controllerutil.AddFinalizer
	case has && (!onDelete || (deleting && drained)):
		change = controllerutil.RemoveFinalizer
	default:
		return nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	change(node, FinalizerDrain)
	logf.FromContext(ctx).Info("updating vacate's finalizer on the node", "node", node.Name, "add", !has, "deleting", deleting)
	if err := r.Client.Patch(ctx, node, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating finalizer %s on node %s: %w", FinalizerDrain, node.Name, err)
	}
	return nil
}

// SetupWithManager watches what the triggers read: the nodes' taints,
// cordon and labels (which choose the policy), the policies, and the
// NodeDrains (a deleted one is requested again while a trigger holds).
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("trigger").
		For(&corev1.Node{}, builder.WithPredicates(triggerFieldsChanged())).
		Watches(&v1alpha1.DrainPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allNodes),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})). // not on status writes
		Watches(&v1alpha1.NodeDrain{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*v1alpha1.NodeDrain).Spec.NodeName}}}
		}), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, n := e.ObjectOld.(*v1alpha1.NodeDrain), e.ObjectNew.(*v1alpha1.NodeDrain)
				return o.Generation != n.Generation || o.Status.Phase != n.Status.Phase
			},
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(r)
}

// triggerFieldsChanged passes node updates that can change a trigger:
// taints, cordon, labels, vacate's cordon annotation.
func triggerFieldsChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return o.Spec.Unschedulable != n.Spec.Unschedulable ||
			!o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
			controllerutil.ContainsFinalizer(o, FinalizerDrain) != controllerutil.ContainsFinalizer(n, FinalizerDrain) ||
			taintKeys(o) != taintKeys(n) ||
			!maps.Equal(o.Labels, n.Labels) ||
			o.Annotations[nodedrain.AnnotationCordonedBy] != n.Annotations[nodedrain.AnnotationCordonedBy]
	}}
}

func (r *Reconciler) allNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &corev1.NodeList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, n := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: n.Name}})
	}
	return reqs
}

func taintKeys(n *corev1.Node) string {
	keys := make([]string, 0, len(n.Spec.Taints))
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key+"="+string(t.Effect))
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// dedupe drops repeated names (a taint key with two effects), keeping the
// first.
func dedupe(rs []v1alpha1.Requester) []v1alpha1.Requester {
	out := rs[:0]
	for i, r := range rs {
		if i == 0 || rs[i-1].Name != r.Name {
			out = append(out, r)
		}
	}
	return out
}
