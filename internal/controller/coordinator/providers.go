package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/evacuationprovider"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/providers"
)

// +kubebuilder:rbac:groups=vacate.dev,resources=evacuations,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch;patch

// vacate's turn asks EvacuationProviders too. A pod that an
// EvacuationProvider protects (it selects the pod, takes part in
// Maintenance drains, and is BeforeEviction) gets in vacate's turn what a
// Maintenance drain of its node would ask of the provider: an Evacuation of
// the pod's node, with the pod among its protected pods. The provider
// protocol is per node (pkg/evacuation: Evacuate(node), Cancel(node)), so
// there is one Evacuation per node and provider, whoever asks:
//   - none: the turn creates one for the pod's Eviction, labelled
//     vacate.dev/eviction with the Eviction's UID, which is also its
//     drainUID (Evacuation.ForEviction);
//   - a drain's (a drain of the node takes an Eviction's over): the turn
//     waits until it is Completed with the pod among its protected pods;
//   - another pod's Eviction's, or one being undone: the turn waits until it
//     is gone (one pod's eviction at a time per node and provider: a
//     provider's undo is per node, and would undo the other's too).
// The turn is done when every such provider has Completed, and the pod's
// hook too (responder.go). When the Eviction ends, the pod evicted or every
// requester gone, its own Evacuations are undone (desired Cancel: the node
// is given back to the provider, as when a drain is undone) and deleted
// once the provider confirms, never took the request up, is gone, or the
// node's policy's timeouts.cancel passed (endEvacuations).

// askProviders asks every provider that protects the pod, and says whether
// all are done with it, with a message per provider.
func (r *Reconciler) askProviders(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node) (bool, []string, error) {
	list := &v1alpha1.EvacuationProviderList{}
	if err := r.Client.List(ctx, list); err != nil {
		return false, nil, fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	labelsOf := policy.NamespaceLabelsFrom(ctx, r.Client)
	done, msgs := true, []string(nil)
	for i := range list.Items {
		p := &list.Items[i]
		if !providers.TakesPart(p, v1alpha1.ModeMaintenance) || providers.Stage(p) != v1alpha1.StageBeforeEviction {
			continue // AfterEviction works once pods are gone from a drained node: nothing to do for one pod
		}
		selects, err := providers.Selects(p, pod, labelsOf)
		if err != nil {
			return false, nil, err
		}
		if !selects {
			continue
		}
		pdone, msg, err := r.askProvider(ctx, ev, pod, node, p)
		if err != nil {
			return false, nil, err
		}
		done = done && pdone
		msgs = append(msgs, msg)
	}
	return done, msgs, nil
}

// askProvider asks one provider for the pod (the rules above) and says
// whether it is done with it.
func (r *Reconciler) askProvider(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node, p *v1alpha1.EvacuationProvider) (bool, string, error) {
	name := v1alpha1.EvacuationName(node.Name, p.Name)
	have := &v1alpha1.Evacuation{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Name: name}, have); {
	case apierrors.IsNotFound(err):
		if !p.DeletionTimestamp.IsZero() {
			return true, "EvacuationProvider " + p.Name + " is being deleted: it is asked nothing new", nil
		}
		if err := r.createEvacuation(ctx, ev, pod, node, p, name); err != nil {
			return false, "", err
		}
		return false, "EvacuationProvider " + p.Name + ": asked (Evacuation " + name + ")", nil
	case err != nil:
		return false, "", fmt.Errorf("reading Evacuation %s: %w", name, err)
	}
	prefix := "EvacuationProvider " + p.Name + ", Evacuation " + name + ": "
	mine := have.ForEviction() && have.Spec.DrainUID == string(ev.UID)
	switch {
	case mine && (!have.DeletionTimestamp.IsZero() || have.Spec.Desired == v1alpha1.DesiredCancel):
		// Someone deleted it or asked for its undo meanwhile: it is undone
		// as at the end, then asked again.
		since := r.Clock.Now()
		if !have.DeletionTimestamp.IsZero() {
			since = have.DeletionTimestamp.Time
		}
		if _, err := r.undoEvacuation(ctx, ev, have, since); err != nil {
			return false, "", err
		}
		return false, prefix + "being undone (deleted or cancelled by someone else); asked again once it is gone", nil
	case !have.DeletionTimestamp.IsZero() || have.Spec.Desired == v1alpha1.DesiredCancel:
		return false, prefix + "being undone; asked again once it is gone", nil
	case have.ForEviction() && !mine:
		return false, prefix + "at work for another pod's eviction (" + others(have, pod) + "); one pod at a time per node and provider", nil
	case !slices.ContainsFunc(have.Spec.ProtectedPods, func(pp v1alpha1.ProtectedPod) bool { return pp.UID == string(pod.UID) }):
		return false, prefix + "asked by a drain of node " + node.Name + " for other pods; waiting until the drain records this one", nil
	}
	done, why, _ := hold.Judge(have, p, r.Clock.Now())
	if !have.ForEviction() {
		why = "asked by a drain of node " + node.Name + ": " + why
	}
	return done, prefix + why, nil
}

// others names the pods an Evacuation protects but the given one.
func others(ev *v1alpha1.Evacuation, pod *corev1.Pod) string {
	var out []string
	for _, pp := range ev.Spec.ProtectedPods {
		if pp.UID != string(pod.UID) {
			out = append(out, pp.Namespace+"/"+pp.Name)
		}
	}
	if len(out) == 0 {
		return "a pod of the same name before"
	}
	return "pod " + fmt.Sprint(out)
}

// createEvacuation asks the provider for the pod's Eviction: the
// provider's finalizer first (it cannot vanish while the Evacuation is
// unfinished), then the Eviction's (it stays until its Evacuations are
// undone), then the Evacuation, with vacate.dev/cancel (deleting it never
// skips the undo).
func (r *Reconciler) createEvacuation(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod, node *corev1.Node, p *v1alpha1.EvacuationProvider, name string) error {
	if ok, err := evacuationprovider.AddFinalizer(ctx, r.Client, p); err != nil || !ok {
		return err
	}
	if err := r.holdForHook(ctx, ev); err != nil {
		return err
	}
	evac := &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.FinalizerCancel},
			Labels: map[string]string{v1alpha1.LabelEviction: string(ev.UID)}},
		Spec: v1alpha1.EvacuationSpec{NodeName: node.Name, NodeUID: string(node.UID), Provider: p.Name, Mode: v1alpha1.ModeMaintenance,
			Desired: v1alpha1.DesiredEvacuate, DrainUID: string(ev.UID), Stage: v1alpha1.StageBeforeEviction, Reporter: p.Spec.Reporter.UserName(),
			ProtectedPods: []v1alpha1.ProtectedPod{{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}}},
	}
	if err := r.Client.Create(ctx, evac); err != nil && !apierrors.IsAlreadyExists(err) { // AlreadyExists: the cache is behind; the next pass reads it
		return fmt.Errorf("creating Evacuation %s for the eviction of pod %s/%s: %w", name, pod.Namespace, pod.Name, err)
	}
	logf.FromContext(ctx).Info("asked an EvacuationProvider for a pod's eviction", "pod", client.ObjectKeyFromObject(pod), "provider", p.Name, "evacuation", name)
	r.Events.Eventf(ev, pod, corev1.EventTypeNormal, ReasonAskedProvider, "Evacuate",
		"asked EvacuationProvider %s to evacuate node %s for the pod (Evacuation %s)", p.Name, node.Name, name)
	return nil
}

// endEvacuations undoes the Evacuations an ended Eviction asked for (those
// a drain took over are the drain's to undo), and says whether a pass must
// come back for them.
func (r *Reconciler) endEvacuations(ctx context.Context, ev *lifecyclev1alpha1.Eviction) (reconcile.Result, bool, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{v1alpha1.LabelEviction: string(ev.UID)}); err != nil {
		return reconcile.Result{}, false, fmt.Errorf("listing the Evacuations of Eviction %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	pending := false
	for i := range list.Items {
		evac := &list.Items[i]
		if !evac.ForEviction() || (!evac.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(evac, v1alpha1.FinalizerCancel)) {
			continue
		}
		waits, err := r.undoEvacuation(ctx, ev, evac, endTime(ev))
		if err != nil {
			return reconcile.Result{}, false, err
		}
		pending = pending || waits
	}
	if pending {
		return reconcile.Result{RequeueAfter: hookPoll}, true, nil
	}
	return reconcile.Result{}, false, nil
}

// undoEvacuation asks the provider to undo an Eviction's Evacuation, and
// lets it go once it may (the rules of a drain's undo, nodedrain
// cancelOne), timeouts.cancel counting from since; it says whether it is
// still waiting.
func (r *Reconciler) undoEvacuation(ctx context.Context, ev *lifecyclev1alpha1.Eviction, evac *v1alpha1.Evacuation, since time.Time) (bool, error) {
	settled := evacuationprovider.CancelSettled(evac)
	gone := apierrors.IsNotFound(r.Client.Get(ctx, types.NamespacedName{Name: evac.Spec.Provider}, &v1alpha1.EvacuationProvider{}))
	limit := r.cancelLimit(ctx, evac.Spec.NodeName)
	expired := r.Clock.Now().Sub(since) >= limit
	if settled || gone || expired {
		switch {
		case settled:
		case gone:
			r.Events.Eventf(ev, nil, corev1.EventTypeWarning, v1alpha1.EventProviderGone, "Cancel",
				"EvacuationProvider %s is gone: nobody can undo Evacuation %s; deleting it", evac.Spec.Provider, evac.Name)
		default:
			r.Events.Eventf(ev, nil, corev1.EventTypeWarning, v1alpha1.EventCancelTimeout, "Cancel",
				"EvacuationProvider %s did not confirm the undo of Evacuation %s within %s (timeouts.cancel): what it moved may stay moved",
				evac.Spec.Provider, evac.Name, limit)
		}
		untouched := evac.Status.ObservedGeneration == 0 && evac.Status.HeartbeatTime == nil
		if err := evacuationprovider.LetGo(ctx, r.Client, evac, untouched && !expired); apierrors.IsConflict(err) {
			return true, nil
		} else if err != nil {
			return false, err
		}
		return false, nil
	}
	if evac.Spec.Desired != v1alpha1.DesiredCancel {
		patch := client.MergeFromWithOptions(evac.DeepCopy(), client.MergeFromWithOptimisticLock{})
		evac.Spec.Desired = v1alpha1.DesiredCancel
		if err := r.Client.Patch(ctx, evac, patch); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("undoing Evacuation %s: %w", evac.Name, err)
		}
	}
	return true, nil
}

// cancelLimit is timeouts.cancel of the policy of the node, or the default
// when it cannot be read.
func (r *Reconciler) cancelLimit(ctx context.Context, nodeName string) time.Duration {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nodeName}, node); err == nil {
		if p, err := policy.Resolve(ctx, r.Client, "", node); err == nil {
			return p.CancelTimeout
		}
	}
	return policy.DefaultCancelTimeout
}

// endTime is when the Eviction ended (its final condition's transition),
// or its creation when it records none.
func endTime(ev *lifecyclev1alpha1.Eviction) time.Time {
	for _, t := range []lifecyclev1alpha1.EvictionConditionType{lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionFailed} {
		if c := findTrue(ev, t); c != nil {
			return c.LastTransitionTime.Time
		}
	}
	return ev.CreationTimestamp.Time
}
