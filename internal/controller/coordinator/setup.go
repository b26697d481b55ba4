package coordinator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// TargetIndex indexes EvictionRequests and Evictions by their target pod's
// name (index.RegisterEvictionRequests).
const TargetIndex = index.EvictionTarget

// Event reasons, on the Eviction (regarding) and its pod (related).
const (
	ReasonCoordinating = "Coordinating"
	ReasonEvicted      = "TargetEvicted"
	ReasonEvictionEnd  = "EvictionFailed"
	// ReasonNotItsResponders: an Eviction listed responders that are not
	// its pod's; it was deleted and made again.
	ReasonNotItsResponders = "NotItsResponders"
	// ReasonHookCancelTimeout: a cancelled Eviction's hook did not
	// acknowledge its DELETE within timeouts.cancel.
	ReasonHookCancelTimeout = "HookCancelTimeout"
	// ReasonAskedProvider: vacate's turn asked an EvacuationProvider to
	// evacuate the pod's node for the pod.
	ReasonAskedProvider = "AskedProvider"
)

// SetupWithManager watches what moves
// a target's Eviction on: its requests, the Eviction (responders write
// their reports there), the pod, and the answers of its eviction calls.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(r.Hooks.Run)); err != nil {
		return fmt.Errorf("adding the coordinator's hook prober: %w", err)
	}
	b := ctrl.ControllerManagedBy(mgr).
		Named("evictionrequest").
		Watches(&lifecyclev1alpha1.EvictionRequest{}, handler.EnqueueRequestsFromMapFunc(requestTarget)).
		Watches(&lifecyclev1alpha1.Eviction{}, handler.EnqueueRequestsFromMapFunc(evictionTarget))
	if r.Pods != nil {
		b = b.WatchesRawSource(&source.Informer{Informer: r.Pods, Handler: handler.EnqueueRequestsFromMapFunc(r.requestedPod)})
	} else {
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.requestedPod))
	}
	return b.
		Watches(&v1alpha1.Evacuation{}, handler.EnqueueRequestsFromMapFunc(r.protectedPods)).
		WatchesRawSource(source.Channel(r.Wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

func requestTarget(_ context.Context, o client.Object) []reconcile.Request {
	if p := o.(*lifecyclev1alpha1.EvictionRequest).Spec.Target.Pod; p != nil {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: p.Name}}}
	}
	return nil
}

func evictionTarget(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetName()
	if p := o.(*lifecyclev1alpha1.Eviction).Spec.Target.Pod; p != nil {
		name = p.Name
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// requestedPod brings a pass for a pod that a request names: the others,
// nearly every pod of the cluster, cost one index lookup.
func (r *Reconciler) requestedPod(ctx context.Context, o client.Object) []reconcile.Request {
	list := &lifecyclev1alpha1.EvictionRequestList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{TargetIndex: o.GetName()}); err != nil || len(list.Items) == 0 {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
}

// protectedPods brings a pass for each requested pod an Evacuation
// protects: a provider's report may end vacate's turn (a drain's
// Evacuation too), and an undone one lets an ended Eviction go.
func (r *Reconciler) protectedPods(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, pp := range o.(*v1alpha1.Evacuation).Spec.ProtectedPods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pp.Namespace, Name: pp.Name}}
		out = append(out, r.requestedPod(ctx, pod)...)
	}
	return out
}

// recordEnd records the end of an Eviction as an event and a metric.
func (r *Reconciler) recordEnd(ev *lifecyclev1alpha1.Eviction) {
	for _, t := range []lifecyclev1alpha1.EvictionConditionType{lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionFailed} {
		c := findTrue(ev, t)
		if c == nil {
			continue
		}
		metrics.EvictionRequestsEnded.WithLabelValues(c.Type, c.Reason).Inc()
		kind, reason := corev1.EventTypeNormal, ReasonEvicted
		if t == lifecyclev1alpha1.EvictionConditionFailed {
			kind, reason = corev1.EventTypeWarning, ReasonEvictionEnd
		}
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = ev.Namespace, ev.Name
		if ev.Spec.Target.Pod != nil {
			pod.Name, pod.UID = ev.Spec.Target.Pod.Name, ev.Spec.Target.Pod.UID
		}
		r.Events.Eventf(ev, pod, kind, reason, "Coordinate", "%s (%s): %s", c.Type, c.Reason, c.Message)
		return
	}
}

// countOutcome counts an eviction call of the coordinator's as the drains'
// are counted.
func countOutcome(o eviction.Outcome) {
	if o.Result == eviction.Held {
		metrics.EvictionsHeld.Inc()
		return
	}
	metrics.EvictionsTotal.WithLabelValues(string(o.Result)).Inc()
}
