package nodedrain

import (
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// refusal is the latest PDB refusal of a pod's eviction.
type refusal struct {
	since   time.Time
	message string
}

type refusalCache struct {
	mu sync.Mutex
	m  map[types.UID]refusal
}

func (c *refusalCache) get(uid types.UID) (refusal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[uid]
	return r, ok
}

func (c *refusalCache) record(o eviction.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch o.Result {
	case eviction.PDBBlocked:
		prev, ok := c.m[o.UID]
		if !ok {
			prev.since = o.At
		}
		prev.message = o.Message
		c.m[o.UID] = prev
	case eviction.Evicted, eviction.Gone:
		delete(c.m, o.UID)
	}
}

func (r *Reconciler) onOutcome(o eviction.Outcome) {
	metrics.EvictionsTotal.WithLabelValues(string(o.Result)).Inc()
	r.refusals.record(o)
	r.wake(o.Node)
}

// Blocker reasons beyond the planner's.
const (
	// BlockerPDB: a PodDisruptionBudget refuses the eviction.
	BlockerPDB = "PodDisruptionBudget"
)

// blockerFor says whether a decision holds the drain up, and how.
func (r *Reconciler) blockerFor(d drain.Decision, now time.Time) (v1alpha1.Blocker, bool) {
	b := v1alpha1.Blocker{Pod: d.Key(), Since: metav1.NewTime(now)}
	switch {
	case d.Action == drain.Block:
		b.Reason, b.Detail = string(d.Reason), truncate(d.Detail, maxDetail)
	case d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion:
		b.Reason, b.Detail = string(d.Reason), truncate(d.Detail, maxDetail)
	case d.Action == drain.Evict:
		ref, refused := r.refusals.get(d.Pod.UID)
		if !refused && !d.PDBBlocked {
			return b, false
		}
		b.Reason = BlockerPDB
		pdbs := d.BlockingPDBs
		if len(pdbs) == 0 { // refused while the cached PDB status still allowed it
			pdbs = d.PDBs
		}
		b.Holder = "PodDisruptionBudget " + strings.Join(pdbs, ", ")
		b.Detail = b.Holder + " allows no disruption now"
		if refused {
			b.Since = metav1.NewTime(ref.since)
			if ref.message != "" {
				b.Detail = b.Holder + ": " + truncate(ref.message, maxDetail-len(b.Holder)-2)
			}
		}
	default:
		return b, false
	}
	return b, true
}
