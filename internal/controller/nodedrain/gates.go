package nodedrain

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/eviction"
)

// gates are what the controller remembers of the endpoint-aware pods it
// took out of service, across all drains, beyond their condition (their
// gate, and their last dry run). Whether a pod's eviction is underway is
// the eviction queue's to say (eviction.Queue.State, Budget): a pod out of
// service for its eviction is reserved there. A pod's entry goes when it
// is evicted or back in service, and when its node's drain stops.
type gates struct {
	podMemory[gateEntry]
}

// gateEntry is what is known of one pod.
type gateEntry struct {
	// gate is what is known of a pod taken out of service, if gated
	// (endpoints.go).
	gate  gate
	gated bool
	// tried is when the pod's dry-run eviction was last made.
	tried time.Time
}

// kept says whether anything is left in the entry.
func (e *gateEntry) kept() bool { return e.gated || !e.tried.IsZero() }

// updateGate runs f on the pod's gate, a new one if it has none.
func (g *gates) updateGate(pod *corev1.Pod, f func(*gate)) {
	g.update(pod.UID, pod.Spec.NodeName, func(e *gateEntry) bool {
		if !e.gated {
			e.gate, e.gated = gate{}, true
		}
		f(&e.gate)
		return true
	})
}

// drop forgets that the pod was taken out of service, and its last dry
// run.
func (g *gates) drop(uid types.UID) { g.forget(uid) }

// done drops the gate of a pod whose eviction succeeded (or that is gone),
// and reports whether it had one.
func (g *gates) done(uid types.UID) (had bool) {
	g.update(uid, "", func(e *gateEntry) bool {
		had = e.gated
		return false
	})
	return had
}

// refused records that the queued eviction of a pod out of service was
// refused or held, and reports whether the pod is one.
func (g *gates) refused(o eviction.Outcome) (refused bool) {
	g.update(o.UID, "", func(e *gateEntry) bool {
		if e.gated && e.gate.queued {
			e.gate.queued, e.gate.refused = false, fmt.Sprintf("%s: %s", o.Result, o.Message)
			refused = true
		}
		return e.kept()
	})
	return refused
}

// triedAt records a dry-run eviction of the pod.
func (g *gates) triedAt(pod *corev1.Pod, now time.Time) {
	g.update(pod.UID, pod.Spec.NodeName, func(e *gateEntry) bool {
		e.tried = now
		return true
	})
}
