// Package trigger turns the signals a cluster already produces into drain
// requests. Each trigger is a requester of its own on the node's NodeDrain,
// added and withdrawn on its own (server-side apply, one field manager per
// trigger), so a drain is undone only when its last requester, trigger or
// person, leaves:
//
//   - "taint": the taint vacate.dev/drain, any effect (policy triggers.taint;
//     with NoExecute the taint manager deletes untolerating pods at once, so
//     the NodeDrain controller warns, see nodedrain.warnNoExecute);
//   - "cordon": the node is unschedulable and vacate did not cordon it
//     (triggers.onUnschedulable: Drain);
//   - "external:<key>": a taint of triggers.externalTaints, by default the
//     cluster autoscaler's and Karpenter's;
//   - "maintenance": the node's condition MaintenancePlanned is True
//     (triggers.onMaintenancePlanned: Drain);
//   - "delete": the node is being deleted (triggers.onNodeDelete: Drain). It
//     asks for Decommission, and raises a Maintenance drain (a person's, a
//     taint's) to it, even one already Drained, which then runs again: the
//     node goes away, so everything moves. The finalizer vacate.dev/drain on
//     governed nodes holds a deleted node until its drain is Drained in
//     Decommission, and never longer than timeouts.nodeDeletion after the
//     deletion, whatever the drain's state (then with a Warning event);
//     under Orphan it is removed.
package trigger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
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
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/requests"
)

// requesterExternal starts the requester of an external taint.
const requesterExternal = v1alpha1.RequesterExternalPrefix

// IsTrigger reports whether a requester name is one of the triggers'.
func IsTrigger(name string) bool {
	return name == v1alpha1.RequesterTaint || name == v1alpha1.RequesterCordon || name == v1alpha1.RequesterDelete || name == v1alpha1.RequesterMaintenance ||
		strings.HasPrefix(name, requesterExternal)
}

// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler keeps the triggers' requester entries in step with the nodes,
// and vacate's finalizer on the nodes whose policy drains them on deletion.
type Reconciler struct {
	Client client.Client
	// APIReader reads a drain's managed fields, which the cache strips.
	APIReader client.Reader
	// Clock tells when timeouts.nodeDeletion passes.
	Clock clock.PassiveClock
	// Events records the release of a node whose bound passed.
	Events events.EventRecorder
}

// Reconcile adds the entries of the triggers that hold, raises the drain of
// a deleted node to Decommission, keeps the node finalizer, and withdraws
// the entries that no longer hold. Under an ambiguous policy (or one that
// cannot be resolved) it changes no entry and adds or removes no finalizer,
// but a deleted node is still released when the longest bound that may
// apply passes (see policy.LongestNodeDeletion).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node, err := r.getNode(ctx, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	nd, err := r.getDrain(ctx, req.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if node == nil {
		return reconcile.Result{}, r.withdraw(ctx, nd, nil)
	}
	p, err := policy.Resolve(ctx, r.Client, "", node)
	if err != nil {
		res, berr := r.unresolved(ctx, node, nd)
		if policy.IsAmbiguous(err) {
			logf.FromContext(ctx).Info("leaving the triggers of the node as they are: its policy is ambiguous", "node", req.Name, "reason", err.Error())
			return res, berr
		}
		return res, errors.Join(err, berr)
	}
	wanted := p.Triggers.Wanted(node)
	undoing := nd != nil && !nd.DeletionTimestamp.IsZero() // the delete event brings us back
	var reqErr error
	if !undoing {
		reqErr = r.request(ctx, node.Name, nd, wanted)
	}
	// The finalizer's bound applies even when the request failed.
	res, err := r.nodeFinalizer(ctx, node, nd, p.Triggers.OnNodeDelete, p.NodeDeletion)
	if err = errors.Join(reqErr, err); err != nil || undoing {
		return requeueOnConflict(res, err)
	}
	return requeueOnConflict(res, r.withdraw(ctx, nd, wanted))
}

// requeueOnConflict turns a lost optimistic lock into a requeue: the cache
// has not caught up yet, and the next pass reads again. An error joined
// from several is a requeue only when each of them is a conflict; any other
// is returned (and logged, and retried with backoff).
func requeueOnConflict(res reconcile.Result, err error) (reconcile.Result, error) {
	if err != nil && onlyConflicts(err) {
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
	}
	return res, err
}

// onlyConflicts reports whether err, and every error joined in it, is a
// conflict.
func onlyConflicts(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !onlyConflicts(e) {
				return false
			}
		}
		return true
	}
	return apierrors.IsConflict(err)
}

// getNode reads the node; nil when it is gone.
func (r *Reconciler) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, node)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return node, nil
}

// getDrain reads the node's NodeDrain; nil when there is none.
func (r *Reconciler) getDrain(ctx context.Context, name string) (*v1alpha1.NodeDrain, error) {
	nd := &v1alpha1.NodeDrain{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, nd)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading NodeDrain %s: %w", name, err)
	}
	return nd, nil
}

// request adds the wanted entries that nd lacks. A trigger joining a drain
// restates its mode and policy, never changes them; the delete trigger
// raises a Maintenance drain to Decommission (the node goes away), also when
// its entry is there already.
func (r *Reconciler) request(ctx context.Context, node string, nd *v1alpha1.NodeDrain, wanted []v1alpha1.Requester) error {
	log := logf.FromContext(ctx)
	for _, w := range wanted {
		has := nd != nil && requests.Index(nd, w.Name) >= 0
		var err error
		switch {
		case w.Name == v1alpha1.RequesterDelete && (!has || nd.Spec.Mode != v1alpha1.ModeDecommission):
			log.Info("requesting a Decommission drain for the node's deletion", "node", node, "requester", w.Name)
			err = requests.Raise(ctx, r.Client, node, w, nd)
		case has:
			continue
		case nd != nil:
			log.Info("requesting drain for a trigger", "node", node, "requester", w.Name)
			err = requests.Apply(ctx, r.Client, node, w, nd.Spec.Mode, nd.Spec.PolicyName)
		default:
			log.Info("requesting drain for a trigger", "node", node, "requester", w.Name)
			err = requests.Apply(ctx, r.Client, node, w, "", "")
		}
		if err != nil {
			return fmt.Errorf("requesting the drain of %s for %s: %w", node, w.Name, err)
		}
	}
	return nil
}

// withdraw withdraws the triggers' entries that are not wanted (all of them
// when the node is gone), and deletes the drain when none is left (see
// leftIdle for a withdrawal cut short before the deletion).
func (r *Reconciler) withdraw(ctx context.Context, nd *v1alpha1.NodeDrain, wanted []v1alpha1.Requester) error {
	if nd == nil || !nd.DeletionTimestamp.IsZero() {
		return nil
	}
	if len(nd.Spec.Requesters) == 0 && len(wanted) == 0 { // else a wanted trigger has just joined it
		return r.leftIdle(ctx, nd.Name)
	}
	for _, have := range nd.Spec.Requesters {
		if !IsTrigger(have.Name) || slices.ContainsFunc(wanted, func(w v1alpha1.Requester) bool { return w.Name == have.Name }) {
			continue
		}
		logf.FromContext(ctx).Info("withdrawing a trigger's drain request", "node", nd.Name, "requester", have.Name)
		after, err := requests.Withdraw(ctx, r.Client, nd.DeepCopy(), have.Name)
		if apierrors.IsNotFound(err) {
			return nil // gone: nothing is left to withdraw from
		}
		if err != nil {
			return fmt.Errorf("withdrawing %s from NodeDrain %s: %w", have.Name, nd.Name, err)
		}
		if _, err := requests.DeleteIfIdle(ctx, r.Client, after); err != nil {
			return fmt.Errorf("deleting idle NodeDrain %s: %w", nd.Name, err)
		}
		nd = after
	}
	return nil
}

// leftIdle deletes the node's drain when it has no requester and a trigger
// applied to it: a trigger's withdrawal was cut short between the withdrawal
// and the deletion (a restart, an error, a cache that had not caught up), so
// the trigger finishes it, as 'vacate cancel' finishes an interrupted
// cancel. A drain left idle by someone else (a person who removed the
// entries by hand) is left to them: explain names it. The drain is read from
// the API server, since the cache strips the managed fields that tell.
func (r *Reconciler) leftIdle(ctx context.Context, name string) error {
	live := &v1alpha1.NodeDrain{}
	if err := r.reader().Get(ctx, types.NamespacedName{Name: name}, live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(live.Spec.Requesters) > 0 || !live.DeletionTimestamp.IsZero() || !requests.ManagedBy(live, IsTrigger) {
		return nil
	}
	logf.FromContext(ctx).Info("deleting a NodeDrain a trigger's withdrawal left with no requester", "node", name)
	if _, err := requests.DeleteIfIdle(ctx, r.Client, live); err != nil {
		return fmt.Errorf("deleting idle NodeDrain %s: %w", name, err)
	}
	return nil
}

// reader reads past the cache: APIReader, or Client when it is not set.
func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// unresolved bounds a deleted node whose policy cannot be resolved (an
// ambiguous one, or one that cannot be read): nothing else is decided for
// it, but the longest bound of the policies that may govern it still
// releases it.
func (r *Reconciler) unresolved(ctx context.Context, node *corev1.Node, nd *v1alpha1.NodeDrain) (reconcile.Result, error) {
	if !deleting(node) || !controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerDrain) {
		return reconcile.Result{}, nil
	}
	list := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	bound := policy.LongestNodeDeletion(node.Labels, list.Items)
	return r.expire(ctx, node, nd, bound, "the longest timeouts.nodeDeletion of the DrainPolicies that may govern it: its policy is unclear")
}

// nodeFinalizer keeps vacate.dev/drain on the nodes whose policy drains
// them on deletion. It releases a deleted node once its drain is Drained in
// Decommission (see drainedForDeletion), or when timeouts.nodeDeletion has
// passed since the deletion whatever the drain's state, and at once when
// the policy no longer asks for it (Orphan).
func (r *Reconciler) nodeFinalizer(ctx context.Context, node *corev1.Node, nd *v1alpha1.NodeDrain, onDelete bool, bound time.Duration) (reconcile.Result, error) {
	has := controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerDrain)
	switch {
	case onDelete && !deleting(node) && !has:
		_, err := r.patchFinalizer(ctx, node, controllerutil.AddFinalizer)
		return reconcile.Result{}, err
	case has && (!onDelete || (deleting(node) && drainedForDeletion(nd))):
		_, err := r.patchFinalizer(ctx, node, controllerutil.RemoveFinalizer)
		return reconcile.Result{}, err
	case has && deleting(node):
		return r.expire(ctx, node, nd, bound, "timeouts.nodeDeletion of its DrainPolicy")
	}
	return reconcile.Result{}, nil
}

// drainedForDeletion reports whether a deleted node's drain is done: Drained
// with its stages run in Decommission (status.mode), so everything moved. A
// drain Drained in Maintenance is not: node deletion raises it, and it runs
// again.
func drainedForDeletion(nd *v1alpha1.NodeDrain) bool {
	return nd != nil && nd.DeletionTimestamp.IsZero() &&
		nd.Drained() && nd.Status.Mode == v1alpha1.ModeDecommission
}

// expire releases a deleted node held by the finalizer once bound has
// passed since its deletionTimestamp, with a Warning event naming the
// drain's state; the release is counted when its patch is written. Before
// that it asks to be woken when the bound passes. what says where the bound
// comes from, for people.
func (r *Reconciler) expire(ctx context.Context, node *corev1.Node, nd *v1alpha1.NodeDrain, bound time.Duration, what string) (reconcile.Result, error) {
	if left := node.DeletionTimestamp.Add(bound).Sub(r.Clock.Now()); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	logf.FromContext(ctx).Info("releasing a deleted node before its drain is done: timeouts.nodeDeletion passed",
		"node", klog.KObj(node), "bound", bound, "drain", drainState(nd))
	if released, err := r.patchFinalizer(ctx, node, controllerutil.RemoveFinalizer); err != nil || !released {
		return reconcile.Result{}, err
	}
	metrics.NodeDeletionTimeouts.Inc()
	var related runtime.Object
	if nd != nil {
		related = nd
	}
	r.Events.Eventf(node, related, corev1.EventTypeWarning, v1alpha1.EventNodeDeletionTimeout, "Release",
		"released the deleted node after %s (%s) although %s; its pods and data may not have moved", bound, what, drainState(nd))
	return reconcile.Result{}, nil
}

// drainState says where a deleted node's drain stands, for the release
// event.
func drainState(nd *v1alpha1.NodeDrain) string {
	switch {
	case nd == nil:
		return "it has no NodeDrain"
	case !nd.DeletionTimestamp.IsZero():
		return fmt.Sprintf("its NodeDrain is being undone (phase %s)", orPending(nd.Status.Phase))
	}
	mode := nd.Status.Mode // the mode its stages ran in
	if mode == "" {
		mode = nd.Spec.Mode
	}
	state := fmt.Sprintf("its NodeDrain is %s in mode %s", orPending(nd.Status.Phase), mode)
	if nd.Status.Remaining > 0 || nd.Status.Blocked > 0 {
		state += fmt.Sprintf(" with %d pod(s) remaining, %d blocked", nd.Status.Remaining, nd.Status.Blocked)
	}
	if c := nd.AdmissionHold(); c != nil {
		state += fmt.Sprintf(", not admitted (%s)", c.Reason)
	}
	return state
}

func orPending(p v1alpha1.DrainPhase) v1alpha1.DrainPhase {
	if p == "" {
		return v1alpha1.PhasePending
	}
	return p
}

func deleting(node *corev1.Node) bool { return !node.DeletionTimestamp.IsZero() }

// patchFinalizer adds or removes vacate.dev/drain on the node, with an
// optimistic lock, and reports whether it wrote the change. A node already
// gone needs nothing.
func (r *Reconciler) patchFinalizer(ctx context.Context, node *corev1.Node, change func(client.Object, string) bool) (bool, error) {
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if !change(node, v1alpha1.FinalizerDrain) {
		return false, nil
	}
	logf.FromContext(ctx).Info("updating vacate's finalizer on the node", "node", node.Name,
		"add", controllerutil.ContainsFinalizer(node, v1alpha1.FinalizerDrain), "deleting", deleting(node))
	err := r.Client.Patch(ctx, node, patch)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("updating finalizer %s on node %s: %w", v1alpha1.FinalizerDrain, node.Name, err)
	}
	return true, nil
}

// SetupWithManager watches what the triggers read: the nodes' taints,
// cordon and labels (which choose the policy), the policies, and the
// NodeDrains (a deleted one is requested again while a trigger holds; a
// deleted node is released when its drain ends). Without a clock or an
// event recorder it uses the real clock and the manager's recorder.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Events == nil {
		r.Events = mgr.GetEventRecorder("vacate-controller")
	}
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
				return o.Generation != n.Generation || o.Status.Phase != n.Status.Phase || o.Status.Mode != n.Status.Mode
			},
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(r)
}

// triggerFieldsChanged passes node updates that can change a trigger:
// taints, cordon, labels, vacate's cordon annotation, whether the condition
// MaintenancePlanned is True (not the kubelet's heartbeats).
func triggerFieldsChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
		return o.Spec.Unschedulable != n.Spec.Unschedulable ||
			!o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
			controllerutil.ContainsFinalizer(o, v1alpha1.FinalizerDrain) != controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerDrain) ||
			taintKeys(o) != taintKeys(n) ||
			!maps.Equal(o.Labels, n.Labels) ||
			o.Annotations[v1alpha1.AnnotationCordonedBy] != n.Annotations[v1alpha1.AnnotationCordonedBy] ||
			!maintenanceEqual(policy.MaintenancePlanned(o), policy.MaintenancePlanned(n))
	}}
}

// maintenanceEqual says whether two MaintenancePlanned conditions (nil: not
// True) say the same: the requester's reason carries reason and message.
func maintenanceEqual(a, b *corev1.NodeCondition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Reason == b.Reason && a.Message == b.Message
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
