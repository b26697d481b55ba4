package nodedrain

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// A pod's way out of the node is a few steps, each waiting for the one
// before it (drain.Next): held by its evacuation or HTTP hook, surged (a
// replacement Ready elsewhere first), taken out of its Services
// (endpoint-aware), evicted. The nextSteps stage decides each pod's next
// step; the stages after it carry them out, one kind each, in that order:
// endpointAware (Held, OutOfService: endpoints.go), surgePods (Surge:
// surge.go), requestEvictions (Request: requests.go), evict (Evict:
// evict.go).

// podStep is a pod the planner evicts, what the pass knows of it, and its
// next step.
type podStep struct {
	drain.Decision
	key string // namespace/name
	// rec is what the eviction queue and the gates remember of it;
	// holder what holds it (step Held); surge what the pass read of its
	// surge (not read for a held pod).
	rec    podRecord
	holder v1alpha1.Blocker
	surge  surgeFacts
	step   drain.Step
	// ready: an endpoint-aware pod out of service whose endpoints settled;
	// the evict stage queues its eviction (endpointAware).
	ready bool
}

// nextSteps reads what the pass knows of each pod the planner evicts (is
// it held, does it wait for its surge, is it out of service, what the
// eviction queue knows of it) and asks drain.Next, which `vacate plan`
// asks too, for its next step. It changes nothing; a replacement that
// serves is recorded (SurgeReady).
func (r *Reconciler) nextSteps(ctx context.Context, s *scope) (reconcile.Result, error) {
	plan := *s.plan
	s.steps = s.steps[:0]
	for _, d := range plan.Decisions {
		if d.Action != drain.Evict {
			continue
		}
		p := podStep{Decision: d, key: d.Key(), rec: r.recordOf(d.Pod.UID)}
		var held bool
		p.holder, held = s.evac.holds.Of(d.Pod)
		if !held {
			var err error
			if p.surge, err = r.surgeFactsOf(ctx, s, d); err != nil {
				return reconcile.Result{}, err
			}
		}
		f := drain.PodFacts{Held: held, Surge: p.surge.waits(), SurgeServing: p.surge.rep != nil && p.surge.serves, Requested: r.Requests && len(d.Pod.Spec.EvictionResponders) > 0}
		p.step = drain.Next(d, f.WithGate(d, plan.PDBs, p.rec.gated))
		s.steps = append(s.steps, p)
	}
	return reconcile.Result{}, nil
}

// podRecord is what the controller knows of one pod's eviction, read at
// once: the eviction queue's state and the pod's gate.
type podRecord struct {
	eviction.PodState
	gateEntry
}

// recordOf reads the pod's record.
func (r *Reconciler) recordOf(uid types.UID) podRecord {
	return podRecord{PodState: r.Evictions.State(uid), gateEntry: r.gates.get(uid)}
}
