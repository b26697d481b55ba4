// Package metrics defines vacate's Prometheus metrics, registered with
// controller-runtime's registry so they are served on /metrics.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/serving"
	"github.com/vacate-dev/vacate/internal/version"
	"github.com/vacate-dev/vacate/internal/version/buildinfo"
)

// Label names.
const (
	LabelResult     = "result"
	LabelReason     = "reason"
	LabelNode       = "node"
	LabelPhase      = "phase"
	LabelState      = "state"
	LabelProvider   = "provider"
	LabelEvacuation = "evacuation"
	// LabelPolicy is a drain's DrainPolicy (status.policy), empty under
	// the built-in defaults.
	LabelPolicy = "policy"
	// LabelCondition is the condition that ended an Eviction.
	LabelCondition = "condition"
)

// ResultCancelled is the result of a drain whose requesters all left
// before it was Drained.
const ResultCancelled = "Cancelled"

// Results of vacate_out_of_service_total besides eviction.Evicted.
const (
	ResultEndpointsTimeout = "EndpointsTimeout"
	ResultRestored         = "Restored"
)

var (
	// DrainsTotal counts drains that ended, by result (Drained, Failed,
	// Cancelled) and DrainPolicy ("" for the built-in defaults).
	DrainsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vacate_drains_total",
		Help: "Drains that ended, by result and DrainPolicy (empty: the built-in defaults).",
	}, []string{LabelResult, LabelPolicy})
	// DrainDuration observes the time from admission to Drained, by
	// DrainPolicy.
	DrainDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vacate_drain_duration_seconds",
		Help:    "Time from a drain's admission to Drained, by DrainPolicy (empty: the built-in defaults).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{LabelPolicy})
	// EvictionsTotal counts eviction attempts by result (Evicted, Gone, PDBBlocked, Throttled, Forbidden, Invalid, Failed).
	EvictionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vacate_evictions_total",
		Help: "Eviction API calls, by result.",
	}, []string{LabelResult})
	// PodsBlocked is the number of pods holding drains up now, by reason.
	PodsBlocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vacate_pods_blocked",
		Help: "Pods that hold a drain up now, by reason.",
	}, []string{LabelReason})
	// DrainsQueued is the number of requested drains waiting for admission, by reason.
	DrainsQueued = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vacate_drains_queued",
		Help: "Requested drains waiting for admission now, by reason (WaitingForSlot, WaitingForZone, WaitingForPDBHeadroom, WaitingForBatch, OutsideMaintenanceWindow, InvalidSchedule).",
	}, []string{LabelReason})
	// Admissions counts drains admitted.
	Admissions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vacate_drain_admissions_total",
		Help: "Drains admitted to start.",
	})
	// QueueWait observes the time from a drain's request to its admission.
	QueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "vacate_drain_queue_wait_seconds",
		Help:    "Time from a drain's request to its admission.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16),
	})
)

var registerOnce sync.Once

// Register adds the metrics to controller-runtime's registry, with every
// known label value of the counters at zero, so that a rate over a result
// that never happened yet is 0 rather than no data (and dashboards and
// alerts see the series from the start); later calls do nothing.
func Register() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(DrainsTotal, DrainDuration, EvictionsTotal, PodsBlocked, DrainsQueued, Admissions, QueueWait, NodeDeletionTimeouts, EvictionsHeld,
			EndpointsUpdate, OutOfService, ServingSet, Surges, EvictionRequestsEnded, HookCalls, HookCallDuration, buildinfo.Collector("vacate-controller", version.Get()))
		initLabels()
		initHookLabels()
	})
}

// initLabels creates the counters' children for every label value the
// controllers count.
func initLabels() {
	for _, r := range []string{string(v1alpha1.PhaseDrained), string(v1alpha1.PhaseFailed), ResultCancelled} {
		// The built-in defaults' series exist from the start; a DrainPolicy's
		// from its first drain.
		DrainsTotal.WithLabelValues(r, "")
	}
	DrainDuration.WithLabelValues("")
	for _, r := range []eviction.Result{eviction.Evicted, eviction.Gone, eviction.PDBBlocked, eviction.Throttled,
		eviction.Forbidden, eviction.Invalid, eviction.Failed} {
		EvictionsTotal.WithLabelValues(string(r))
	}
	for _, r := range []string{string(eviction.Evicted), ResultEndpointsTimeout, ResultRestored} {
		OutOfService.WithLabelValues(r)
	}
	for _, r := range []string{serving.ReasonServing, serving.ReasonRestored} {
		ServingSet.WithLabelValues(r)
	}
	for _, r := range []string{v1alpha1.SurgeStarting, v1alpha1.SurgeHandedOver, v1alpha1.SurgeFailed, v1alpha1.SurgeCancelled} {
		Surges.WithLabelValues(r)
	}
	for _, c := range []struct{ condition, reason string }{
		{"TargetEvicted", "PodDeleted"}, {"TargetEvicted", "PodTerminal"},
		{"Failed", "CanceledDueToNoRequesters"}, {"Failed", "NoFurtherResponder"},
	} {
		EvictionRequestsEnded.WithLabelValues(c.condition, c.reason)
	}
}

// NodeDeletionTimeouts counts deleted nodes released by timeouts.nodeDeletion
// before their drain was done: counted when the finalizer's removal is
// written.
var NodeDeletionTimeouts = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "vacate_node_deletion_timeouts_total",
	Help: "Deleted nodes released by timeouts.nodeDeletion before their drain was done.",
})

// EvictionsHeld counts queued evictions dropped right before their Eviction
// API call because the pod may not be evicted now (the queue's MayEvict said
// no); no call was made.
var EvictionsHeld = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "vacate_evictions_held_total",
	Help: "Queued evictions dropped before their Eviction API call because the pod was held.",
})

// EvictionRequestsEnded counts the Evictions the EvictionRequest coordinator
// ended, by the condition that ended them (TargetEvicted, Failed) and its
// reason (PodDeleted, PodTerminal, CanceledDueToNoRequesters,
// NoFurtherResponder, ...).
var EvictionRequestsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vacate_eviction_requests_ended_total",
	Help: "Evictions (EvictionRequest API) the coordinator ended, by condition (TargetEvicted, Failed) and reason.",
}, []string{LabelCondition, LabelReason})

// EndpointsUpdate observes, per endpoint-aware pod, the time from vacate
// taking it out of service (its vacate.dev/serving condition False) to
// every EndpointSlice that lists it showing it not ready, or none listing
// it.
var EndpointsUpdate = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "vacate_endpoints_update_seconds",
	Help:    "Time from an endpoint-aware pod taken out of service to its EndpointSlices showing it not ready.",
	Buckets: prometheus.ExponentialBuckets(0.025, 2, 12),
})

// OutOfService counts endpoint-aware pods taken out of service before their
// eviction, by result: Evicted (evicted once its endpoints were updated and
// the settle time passed), EndpointsTimeout (evicted when endpoints.timeout
// passed with an EndpointSlice still showing it ready), Restored (back in
// service: its eviction was refused after all).
var OutOfService = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vacate_out_of_service_total",
	Help: "Endpoint-aware pods taken out of service before their eviction, by result (Evicted, EndpointsTimeout, Restored).",
}, []string{LabelResult})

// Surges counts surge drains' replacements (DrainPolicy surge), by what
// became of them: Starting (created), HandedOver (the pod left and its
// ReplicaSet adopted the replacement), Failed (not Ready within
// surge.readyTimeout: removed), Cancelled (removed: the drain was
// cancelled, or the pod no longer leaves). Counted when the drain's status
// recording it is written.
var Surges = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vacate_surges_total",
	Help: "Replacements brought up by surge drains, by what became of them (Starting, HandedOver, Failed, Cancelled).",
}, []string{LabelResult})

// ServingSet counts the vacate.dev/serving conditions the serving
// controller wrote, by result: Serving (a new gated pod let serve),
// Restored (a pod whose drain ended put back in service).
var ServingSet = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vacate_serving_conditions_total",
	Help: "vacate.dev/serving conditions the controller set True, by reason (Serving, Restored).",
}, []string{LabelReason})
