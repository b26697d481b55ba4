package nodedrain

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/eviction"
)

// gates are what the controller remembers of the endpoint-aware pods it
// took out of service, across all drains, beyond their condition: one
// entry per pod UID, under one lock. Whether a pod's eviction is underway
// is the eviction queue's to say (eviction.Queue.State, Budget): a pod out
// of service for its eviction is reserved there.
//
// An entry goes when the pod is evicted or back in service, and when its
// node's drain stops.
type gates struct {
	mu   sync.Mutex
	pods map[types.UID]*gateEntry
}

// gateEntry is what is known of one pod.
type gateEntry struct {
	node string
	// gate is what is known of a pod taken out of service, if gated
	// (endpoints.go).
	gate  gate
	gated bool
	// tried is when the pod's dry-run eviction was last made.
	tried time.Time
}

// get is a copy of the pod's entry; the zero entry if it has none.
func (g *gates) get(uid types.UID) gateEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.pods[uid]; e != nil {
		return *e
	}
	return gateEntry{}
}

// update runs f on the pod's entry (a new one if it has none) under the
// lock, and keeps the entry only if f left something in it.
func (g *gates) update(uid types.UID, node string, f func(*gateEntry)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.pods[uid]
	if !ok {
		e = &gateEntry{node: node}
	}
	f(e)
	switch {
	case !e.gated && e.tried.IsZero():
		delete(g.pods, uid)
	case !ok:
		if g.pods == nil {
			g.pods = map[types.UID]*gateEntry{}
		}
		g.pods[uid] = e
	}
}

// updateGate runs f on the pod's gate, a new one if it has none.
func (g *gates) updateGate(pod *corev1.Pod, f func(*gate)) {
	g.update(pod.UID, pod.Spec.NodeName, func(e *gateEntry) {
		if !e.gated {
			e.gate, e.gated = gate{}, true
		}
		f(&e.gate)
	})
}

// drop forgets that the pod was taken out of service, and its last dry
// run.
func (g *gates) drop(uid types.UID) {
	g.update(uid, "", func(e *gateEntry) { *e = gateEntry{} })
}

// done drops the gate of a pod whose eviction succeeded (or that is gone),
// and reports whether it had one.
func (g *gates) done(uid types.UID) (had bool) {
	g.update(uid, "", func(e *gateEntry) {
		had = e.gated
		*e = gateEntry{}
	})
	return had
}

// refused records that the queued eviction of a pod out of service was
// refused or held, and reports whether the pod is one.
func (g *gates) refused(o eviction.Outcome) (refused bool) {
	g.update(o.UID, "", func(e *gateEntry) {
		if !e.gated || !e.gate.queued {
			return
		}
		e.gate.queued, e.gate.refused = false, fmt.Sprintf("%s: %s", o.Result, o.Message)
		refused = true
	})
	return refused
}

// triedAt records a dry-run eviction of the pod.
func (g *gates) triedAt(pod *corev1.Pod, now time.Time) {
	g.update(pod.UID, pod.Spec.NodeName, func(e *gateEntry) { e.tried = now })
}

// count is how many of the node's pods have an entry.
func (g *gates) count(node string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, e := range g.pods {
		if e.node == node {
			n++
		}
	}
	return n
}

// forgetNode drops the entries of the node's pods: its drain stopped (the
// serving controller puts its pods back in service).
func (g *gates) forgetNode(node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for uid, e := range g.pods {
		if e.node == node {
			delete(g.pods, uid)
		}
	}
}
