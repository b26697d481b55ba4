// Package serving is the controller that keeps endpoint-aware pods'
// vacate.dev/serving condition True whenever no drain takes them out of
// service: it sets it True on a gated pod as soon as it sees one without
// it (until then the pod is not Ready, and receives no traffic), and puts a
// pod that a drain took out of service back once that drain stopped
// evicting: cancelled, held, failed, deleted. The NodeDrain controller sets
// it False (internal/controller/nodedrain/endpoints.go).
package serving

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/serving"
	"github.com/vacate-dev/vacate/internal/surge"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains,verbs=get;list;watch

// Reconciler sets the condition of gated pods.
type Reconciler struct {
	Client client.Client
	Clock  clock.PassiveClock
	// Workers is how many pods are handled at once: a burst of new gated
	// pods (a rollout) waits for nothing else. Default 4.
	Workers int

	// Pods is the pod cache whose scopes the controller watches: the pods
	// labelled endpoint-aware (and those of drained nodes); unset, the
	// manager's cache of every pod.
	Pods crcache.Informer

	// held are the new pods waiting for a surge's handover, by
	// namespace/name: since when (bounded by surgeHold).
	held sync.Map
}

// surgeHold bounds how long a new pod waits for a surge's handover.
const surgeHold = 15 * time.Second

// Reconcile sets the pod's condition True when it has none, or when a
// drain took it out of service and that drain no longer evicts.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		r.held.Delete(req.NamespacedName)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pod.DeletionTimestamp.IsZero() {
		r.held.Delete(req.NamespacedName)
	}
	if !serving.Gated(pod) || !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return reconcile.Result{}, nil
	}
	if serving.NeedsServing(pod) {
		if wait, err := r.handingOver(ctx, pod); err != nil || wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, err
		}
		r.held.Delete(req.NamespacedName)
		return reconcile.Result{}, r.set(ctx, pod, serving.ReasonServing, "vacate lets the pod serve until a drain evicts it")
	}
	if _, out := serving.OutOfService(pod); !out {
		return reconcile.Result{}, nil
	}
	evicting, why, err := r.drainEvicts(ctx, pod.Spec.NodeName)
	if err != nil || evicting {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.set(ctx, pod, serving.ReasonRestored, why)
}

// handingOver says how long a new pod of a ReplicaSet waits before it may
// serve while a surge's replacement (internal/surge) made from that
// ReplicaSet's template is up and not yet its own. When the pod the
// replacement stands in for is evicted, the ReplicaSet replaces it at once
// (this pod), then adopts the replacement: it has one pod too many and
// deletes one, a not-Ready one first. Not serving, this pod is the one; had
// it served for an instant, the requests a load balancer sent it meanwhile
// would be lost. Bounded by surgeHold.
func (r *Reconciler) handingOver(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "ReplicaSet" || pod.Labels[surge.LabelOf] != "" {
		return 0, nil
	}
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pod.Namespace), client.HasLabels{surge.LabelOf}); err != nil {
		return 0, err
	}
	if !slices.ContainsFunc(list.Items, func(p corev1.Pod) bool {
		return p.DeletionTimestamp.IsZero() && p.Annotations[surge.AnnotationReplicaSet] == ref.Name
	}) {
		return 0, nil
	}
	now := r.Clock.Now()
	first, _ := r.held.LoadOrStore(client.ObjectKeyFromObject(pod), now)
	if left := surgeHold - now.Sub(first.(time.Time)); left > 0 {
		return min(left, 500*time.Millisecond), nil
	}
	return 0, nil
}

// drainEvicts reports whether the drain of the node may still evict its
// pods (NodeDrain.Evicting). When it may not, why says so.
func (r *Reconciler) drainEvicts(ctx context.Context, node string) (bool, string, error) {
	nd := &v1alpha1.NodeDrain{}
	// A drain is named after its node.
	if err := r.Client.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("node %s has no drain any more", node), nil
		}
		return false, "", err
	}
	evicting, why := nd.Evicting()
	return evicting, why, nil
}

func (r *Reconciler) set(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	err := serving.Set(ctx, r.Client, pod, corev1.ConditionTrue, reason, msg, r.Clock.Now())
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod now
	}
	if err == nil {
		metrics.ServingSet.WithLabelValues(reason).Inc()
	}
	return err
}

// SetupWithManager watches gated pods, and drains: a drain that stops
// evicting wakes its node's pods that are out of service.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	gated := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && serving.Gated(p)
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("serving").
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, 4)})
	if r.Pods != nil {
		b = b.WatchesRawSource(&source.Informer{Informer: r.Pods, Handler: &handler.EnqueueRequestForObject{}, Predicates: []predicate.Predicate{gated}})
	} else {
		b = b.For(&corev1.Pod{}, builder.WithPredicates(gated))
	}
	return b.Watches(&v1alpha1.NodeDrain{}, handler.EnqueueRequestsFromMapFunc(r.podsOutOfService),
		builder.WithPredicates(predicate.Funcs{UpdateFunc: evictingChanged})).
		Complete(r)
}

// evictingChanged says whether a drain's update changed whether it may
// evict: only then can a pod it took out of service be due back. (Its
// status changes with every eviction; each listed the node's pods.)
func evictingChanged(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*v1alpha1.NodeDrain)
	n, okNew := e.ObjectNew.(*v1alpha1.NodeDrain)
	if !okOld || !okNew {
		return true
	}
	before, _ := o.Evicting()
	after, _ := n.Evicting()
	return before != after
}

// podsOutOfService are the node's pods a drain took out of service.
func (r *Reconciler) podsOutOfService(ctx context.Context, o client.Object) []reconcile.Request {
	pods, err := index.PodsOnNode(ctx, r.Client, o.(*v1alpha1.NodeDrain).Spec.NodeName)
	if err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, p := range pods {
		if _, ok := serving.OutOfService(p); ok {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
	}
	return out
}
