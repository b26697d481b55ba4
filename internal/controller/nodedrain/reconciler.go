// Package nodedrain is the NodeDrain controller: it cordons the node, lets
// evacuations finish, evicts the pods the planner says must leave through the
// eviction queue, and reports progress; when the last requester leaves it
// undoes exactly what it did.
package nodedrain

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// RBAC of vacate-controller, generated into config/rbac by `make generate`.
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains,verbs=get;list;watch;update;patch;manage
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains/finalizers,verbs=update
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update,namespace=vacate-system,resourceNames=vacate-controller
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=vacate-system
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create,namespace=vacate-system,resourceNames=vacate-controller

// Reconciler reconciles NodeDrains. It keeps no request state: every pass
// recomputes from the cluster; the eviction queue and the gates are caches
// that passes refill.
type Reconciler struct {
	Client ctrl.Client
	// APIReader reads around the cache, for decisions that must not act on
	// a stale copy (undo reads the node it may uncordon); nil uses Client.
	APIReader ctrl.Reader
	Clock     clock.WithDelayedExecution
	Events    events.EventRecorder
	Evictions *eviction.Queue
	// Hooks runs the pods' HTTP evacuation hooks in the background.
	Hooks *hook.Prober
	// AllowLoopbackHooks lets hooks call loopback addresses (development
	// clusters only: --allow-loopback-hooks).
	AllowLoopbackHooks bool
	// Requests: pods that declare eviction responders leave through
	// EvictionRequests of the drain's (requests.go), where vacate requests
	// through Kubernetes' EvictionRequest API (--eviction-requests).
	// Responds: vacate coordinates the API and answers as the responder
	// vacate.dev/evacuation, so a drain leaves the HTTP hook of a pod that
	// declares it to the coordinator.
	Requests, Responds bool
	// Workers is how many drains' passes run at once (--drain-workers);
	// 0 means one. A drain's passes never run concurrently with each other.
	Workers int

	// gates are what is remembered of the endpoint-aware pods taken out
	// of service (gates.go); which evictions are underway is the queue's
	// to say. budgetMu lets one pass at a time compute the PDBs' budgets
	// and queue what they let through (budget.go).
	gates    gates
	budgetMu sync.Mutex
	// waiters are the drains waiting on each PDB's budget (budget.go).
	waiters pdbWaiters
	// surgeRefused are the refused creates of replacements (surge.go).
	surgeRefused surgeRefusals
	blocked      reasonGauge // vacate_pods_blocked
	// writes spaces out status writes that change only progress.
	writes statusWrites
	// Wake receives the NodeDrains to requeue after an eviction outcome.
	Wake chan event.GenericEvent

	// Pods reads a node's pods from the pod cache (its node's scope,
	// listed whole); unset, they are listed from Client.
	Pods index.NodePods
	// PodSource is the pod cache's informer that the pod watch follows
	// (the scopes of drained nodes, and replacements); unset, the
	// manager's cache of every pod.
	PodSource crcache.Informer
	// SliceSource is the EndpointSlice cache's informer (the namespaces of
	// the pods whose slices drains read); unset, the manager's cache.
	SliceSource crcache.Informer
	// guards are the cluster's PodDisruptionBudgets as the PDB watch last
	// saw them (pdbHandler keeps them): a pass plans with them instead of
	// listing and indexing every PDB of the cluster.
	guards drain.Guards

	// annotationWarnings: pods already warned that their annotations are ignored.
	annotationWarnings warnedPods
	// noticed: pods already told of their hold or refusal (events.go).
	noticed noticed
}

// NewReconciler makes a reconciler that queues its evictions on the
// eviction queue (a component of its own, run by the manager). The queue
// reports back through OnOutcome and MayEvict, which the caller hands it
// (controllers.go).
func NewReconciler(c ctrl.Client, clk clock.WithDelayedExecution, rec events.EventRecorder, evictions *eviction.Queue) *Reconciler {
	r := &Reconciler{Client: c, Clock: clk, Events: rec, Wake: make(chan event.GenericEvent, 1024), Evictions: evictions}
	r.blocked = newReasonGauge(metrics.PodsBlocked)
	r.Hooks = hook.NewProber(r.wake)
	r.Hooks.Check = r.stillTheTarget
	return r
}

// fresh is the reader for decisions that must see the latest state.
func (r *Reconciler) fresh() ctrl.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// wake queues a pass of the named drain.
func (r *Reconciler) wake(name string) {
	ev := event.GenericEvent{Object: &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	select {
	case r.Wake <- ev:
	default: // the channel is full of wake-ups; the resync covers the rest
	}
}

// podsOnNode reads the node's pods from the informer cache (r.Pods, or a
// List of r.Client when unset).
func (r *Reconciler) podsOnNode(ctx context.Context, node string) ([]*corev1.Pod, error) {
	pods, err := r.Pods.Or(r.Client)(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	return pods, nil
}

// reasonGauge keeps a gauge by reason as the sum over drains, such as
// vacate_pods_blocked{reason} and vacate_drains_queued{reason}.
type reasonGauge struct {
	mu      sync.Mutex
	vec     *prometheus.GaugeVec
	byDrain map[string]map[string]int
}

func newReasonGauge(vec *prometheus.GaugeVec) reasonGauge {
	return reasonGauge{vec: vec, byDrain: map[string]map[string]int{}}
}

// set replaces a drain's reasons (none clears it) and republishes the sums.
func (g *reasonGauge) set(drainName string, reasons ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	counts := map[string]int{}
	for _, r := range reasons {
		counts[r]++
	}
	if len(counts) == 0 {
		delete(g.byDrain, drainName)
	} else {
		g.byDrain[drainName] = counts
	}
	total := map[string]int{}
	for _, c := range g.byDrain {
		for reason, n := range c {
			total[reason] += n
		}
	}
	g.vec.Reset()
	for reason, n := range total {
		g.vec.WithLabelValues(reason).Set(float64(n))
	}
}
