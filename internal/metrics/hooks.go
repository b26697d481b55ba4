package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vacate-dev/vacate/internal/hook"
)

// LabelMethod is an HTTP hook call's method (POST, GET, DELETE).
const LabelMethod = "method"

// hookMethods are the methods of the HTTP evacuation protocol.
var hookMethods = []string{http.MethodPost, http.MethodGet, http.MethodDelete}

// HookCalls counts the HTTP evacuation hook calls of the NodeDrain
// controller and the EvictionRequest coordinator, by method and result:
// the state the app answered (InProgress, Completed, Failed) or what went
// wrong (hook.Results). Neither pod nor node is a label: the series stay
// 30 whatever the cluster's size, and vacate explain names the pods.
var HookCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "vacate_hook_calls_total",
	Help: "HTTP evacuation hook calls, by method (POST, GET, DELETE) and result (InProgress, Completed, Failed, Answered, NotFound, HTTPError, BadAnswer, Unreachable, Timeout, NoToken).",
}, []string{LabelMethod, LabelResult})

// HookCallDuration observes, by method, the time from a hook call's request
// to its whole answer read (or its failure); calls not made for want of a
// token are not observed. The client gives up at 5s.
var HookCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "vacate_hook_call_duration_seconds",
	Help:    "Time an HTTP evacuation hook call took, from its request to its whole answer or its failure, by method.",
	Buckets: prometheus.ExponentialBuckets(0.005, 2, 11),
}, []string{LabelMethod})

// HookCall counts one call: hook.Prober's Observe.
func HookCall(c hook.Call) {
	HookCalls.WithLabelValues(c.Method, c.Result).Inc()
	if c.Result != hook.ResultNoToken {
		HookCallDuration.WithLabelValues(c.Method).Observe(c.Duration.Seconds())
	}
}

// initHookLabels creates every method's and result's series at zero.
func initHookLabels() {
	for _, m := range hookMethods {
		HookCallDuration.WithLabelValues(m)
		for _, r := range hook.Results {
			HookCalls.WithLabelValues(m, r)
		}
	}
}
