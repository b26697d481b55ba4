package nodedrain

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/serving"
)

// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch

// Endpoint-aware eviction (docs/endpoint-aware.md). A pod with the
// readiness gate vacate.dev/serving leaves its Services before it is
// evicted:
//
//  1. a dry-run eviction says the PodDisruptionBudgets allow it now (taking
//     the pod out of service uses their budget too: it is no longer
//     healthy), within the pass's budget, so one pod per budget at a time;
//  2. its condition goes False (reason Draining): the pod is not Ready, and
//     the EndpointSlice controller marks its endpoints not ready;
//  3. once no EndpointSlice shows it ready, endpoints.settleTime more for
//     the data planes that follow the slices (kube-proxy, ingress
//     controllers, load balancers), with endpoints.timeout bounding the
//     whole wait;
//  4. then its eviction is queued like any other. If the eviction is
//     refused after all (or held), the condition goes back True and the pod
//     starts again from 1.
//
// The condition is the state a restarted controller reads back; the gates
// (gates.go) only add what a pass cannot see on the pod; the eviction
// queue holds the pod's place in its PDBs' budgets while it is out of
// service (eviction.Queue.Reserve).

// gateRetry is how soon a gated pod whose dry-run eviction was refused, or
// could not be made (rate limit), is tried again when nothing it depends
// on changed.
const gateRetry = 5 * time.Second

// cacheGrace is how long a pass trusts its own record that it took a pod
// out of service while the cache does not show it yet.
const cacheGrace = 10 * time.Second

// gate is what the controller knows of a gated pod beyond its condition
// (gates.go).
type gate struct {
	// since is when the pod went out of service.
	since time.Time
	// updated is when its EndpointSlices were first seen not showing it
	// ready (or endpoints.timeout passed).
	updated time.Time
	// queued: its eviction is queued; the queue's state takes over.
	queued bool
	// refused is why its eviction was refused or held after it was taken
	// out of service: it goes back in service.
	refused string
}

// endpointAware is the stage that takes the steps of endpoint-aware pods:
// a held pod this drain took out of service goes back in service
// (backInServiceWhileHeld), a pod whose step is OutOfService leaves its
// Services, within its PDBs' budgets, and its eviction is queued once its
// endpoints settled (queueGated).
func (r *Reconciler) endpointAware(ctx context.Context, s *scope) (reconcile.Result, error) {
	var budget *pdbBudget
	for i, p := range s.steps {
		var err error
		switch p.step {
		case drain.StepHeld:
			err = r.backInServiceWhileHeld(ctx, s, p.Decision, p.holder)
		case drain.StepOutOfService:
			if budget == nil {
				r.budgetMu.Lock()
				defer r.budgetMu.Unlock()
				b := r.pdbBudgets(ctx, *s.plan)
				budget = &b
			}
			s.steps[i].ready, err = r.queueGated(ctx, s, p.Decision, p.rec, *budget)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// queueGated takes a pod with the readiness gate out of service, waits
// for its endpoints, and then says it is ready: the evict stage queues its
// eviction, which its reservation becomes.
func (r *Reconciler) queueGated(ctx context.Context, s *scope, d drain.Decision, rec podRecord, budget pdbBudget) (ready bool, err error) {
	pod, uid := d.Pod, d.Pod.UID
	if rec.Evicted || rec.Pending {
		return false, nil
	}
	since, out := v1alpha1.OutOfService(pod)
	g, known := rec.gate, rec.gated
	switch {
	case known && g.refused != "" && out:
		return false, r.backInService(ctx, s, pod, "its eviction was refused after it was taken out of service ("+g.refused+")")
	case known && g.refused != "":
		r.gates.drop(uid) // back in service; it starts again
		r.Evictions.Unreserve(uid)
		return false, nil
	case !out && known && s.now.Sub(g.since) < cacheGrace:
		s.recheckIn(time.Second) // taken out; the cache does not show it yet
		return false, nil
	case !out:
		r.gates.drop(uid)
		r.Evictions.Unreserve(uid)
		return false, r.takeOutOfService(ctx, s, d, rec, budget)
	}
	if !known { // taken out before a restart, or by the previous leader
		g = gate{since: since}
		r.gates.updateGate(pod, func(e *gate) { *e = g })
		r.Evictions.Reserve(budget.request(s, d))
	}
	return r.awaitEndpoints(ctx, s, d, g)
}

// takeOutOfService sets the pod's condition False once a dry-run eviction
// says its PDBs allow the eviction now, within the pass's budget.
func (r *Reconciler) takeOutOfService(ctx context.Context, s *scope, d drain.Decision, rec podRecord, budget pdbBudget) error {
	pod, uid := d.Pod, d.Pod.UID
	if rec.Refused && !resolvedBy(rec.Refusal, d, budget.fingerprint(d.PDBs)) {
		if left := gateRetry - s.now.Sub(rec.tried); left > 0 {
			s.recheckIn(left)
			return nil
		}
	}
	if !budget.take(d.PDBs) {
		return nil // the PDB's next change wakes the drain
	}
	req := budget.request(s, d)
	o, made := r.Evictions.DryRun(ctx, req) // the queue keeps its answer
	if !made {
		s.recheckIn(time.Second)
		return nil
	}
	r.gates.triedAt(pod, s.now)
	switch o.Result {
	case eviction.Gone:
		return nil
	case eviction.Evicted: // it would be allowed
	default:
		s.recheckIn(gateRetry)
		return nil
	}
	r.Evictions.Reserve(req)
	r.gates.updateGate(pod, func(e *gate) { *e = gate{since: s.now} })
	msg := fmt.Sprintf("drain %s takes the pod out of service before evicting it", s.drain.Name)
	if err := serving.Set(ctx, r.Client, pod, corev1.ConditionFalse, serving.ReasonDraining, msg, s.now); err != nil {
		r.gates.drop(uid)
		r.Evictions.Unreserve(uid)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or another pod now
		}
		return err
	}
	s.log.V(1).Info("took pod out of service", "pod", klog.KObj(pod))
	s.recheckIn(s.policy.EndpointsTimeout)
	return nil
}

// awaitEndpoints says a pod out of service is ready for its eviction once
// no EndpointSlice shows it ready and the settle time has passed, or once
// endpoints.timeout has passed; until then the pod is a blocker.
func (r *Reconciler) awaitEndpoints(ctx context.Context, s *scope, d drain.Decision, g gate) (bool, error) {
	pod, uid := d.Pod, d.Pod.UID
	if g.updated.IsZero() {
		slices, err := index.SlicesOfPod(ctx, r.Client, pod)
		if err != nil {
			return false, err
		}
		listed := serving.Endpoints(slices, uid)
		waited := s.now.Sub(g.since)
		switch {
		case listed.Updated():
			g.updated = s.now
			metrics.EndpointsUpdate.Observe(waited.Seconds())
		case waited >= s.policy.EndpointsTimeout:
			g.updated = s.now.Add(-s.policy.EndpointsSettle)
			metrics.OutOfService.WithLabelValues(metrics.ResultEndpointsTimeout).Inc()
			nd, msg := s.drain, fmt.Sprintf("pod %s: EndpointSlice(s) %s still show it ready %s after it was taken out of service (endpoints.timeout); evicting it anyway",
				d.Key(), strings.Join(listed.Ready, ", "), s.policy.EndpointsTimeout)
			s.podWarning(nd, pod, v1alpha1.EventEndpointsTimeout, "Evict", msg)
		default:
			s.gateBlocker(d, g.since, "out of service since "+g.since.UTC().Format(time.RFC3339)+
				"; EndpointSlice(s) "+strings.Join(listed.Ready, ", ")+" still show it ready")
			s.recheckIn(s.policy.EndpointsTimeout - waited)
			return false, nil
		}
		r.gates.updateGate(pod, func(e *gate) { e.updated = g.updated })
	}
	if left := g.updated.Add(s.policy.EndpointsSettle).Sub(s.now); left > 0 {
		s.gateBlocker(d, g.since, fmt.Sprintf("out of its endpoints; evicted once endpoints.settleTime (%s) has passed", s.policy.EndpointsSettle))
		s.recheckIn(left)
		return false, nil
	}
	r.gates.updateGate(pod, func(e *gate) { e.queued = true })
	return true, nil
}

// backInService sets the condition of a pod whose eviction was refused
// after it was taken out of service back True; it starts again from its
// dry run.
func (r *Reconciler) backInService(ctx context.Context, s *scope, pod *corev1.Pod, why string) error {
	if err := serving.Set(ctx, r.Client, pod, corev1.ConditionTrue, serving.ReasonRestored, why, s.now); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	r.gates.drop(pod.UID)
	r.Evictions.Unreserve(pod.UID)
	r.gates.triedAt(pod, s.now)
	metrics.OutOfService.WithLabelValues(metrics.ResultRestored).Inc()
	nd, key := s.drain, pod.Namespace+"/"+pod.Name
	s.podEvent(nd, pod, corev1.EventTypeWarning, v1alpha1.EventEvictionBlocked, "Evict", "", fmt.Sprintf("pod %s is back in service: %s", key, why))
	s.recheckIn(gateRetry)
	return nil
}

// backInServiceWhileHeld puts a gated pod that this drain took out of
// service back in service when it became held (an evacuation that is not
// Completed, a provider registered since, its HTTP hook): it must not stay
// NotReady for a hold of unbounded length. Once the hold lets it go it
// starts again from its dry run.
func (r *Reconciler) backInServiceWhileHeld(ctx context.Context, s *scope, d drain.Decision, b v1alpha1.Blocker) error {
	if _, out := v1alpha1.OutOfService(d.Pod); !out {
		r.gates.drop(d.Pod.UID)
		r.Evictions.Unreserve(d.Pod.UID)
		return nil
	}
	r.Evictions.Forget(d.Pod.UID)
	holder := b.Holder
	if holder == "" {
		holder = b.Reason
	}
	return r.backInService(ctx, s, d.Pod, "it is held by "+holder+" until that finishes")
}

// gateBlocker records a pod out of service that waits for its endpoints.
func (s *scope) gateBlocker(d drain.Decision, since time.Time, detail string) {
	if s.gated == nil {
		s.gated = map[types.UID]v1alpha1.Blocker{}
	}
	s.gated[d.Pod.UID] = v1alpha1.Blocker{Pod: d.Key(), Reason: v1alpha1.BlockerEndpoints, Since: metav1.NewTime(since),
		Detail: detail}
}

// slicesHandler wakes the drains of the nodes of a changed EndpointSlice's
// endpoints, before and after the change: a pod out of service waits for
// its endpoints to show it not ready, or to be removed.
func (r *Reconciler) slicesHandler() handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		seen := map[string]bool{}
		for _, o := range objs {
			es, ok := o.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, ep := range es.Endpoints {
				if ep.NodeName == nil || seen[*ep.NodeName] {
					continue
				}
				seen[*ep.NodeName] = true
				nd := &v1alpha1.NodeDrain{}
				if err := r.Client.Get(ctx, types.NamespacedName{Name: *ep.NodeName}, nd); err == nil && !nd.Ended() {
					q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: nd.Name}})
				}
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, q, e.Object)
		},
	}
}
