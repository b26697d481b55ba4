package nodedrain

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// finalize marks the drain Drained, once, when the evacuations after
// eviction are Completed.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	if len(s.evac.pending) > 0 { // the Evacuated condition says which
		s.found.afterEviction = true
		return reconcile.Result{RequeueAfter: s.evac.recheck}, nil
	}
	nd.Status.CompletionTime = &metav1.Time{Time: s.now}
	r.forgetNode(nd.Spec.NodeName)
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	took := s.now.Sub(nd.Status.StartTime.Time)
	s.found.drained = &drainedCounts{evicted: nd.Status.Evicted, took: took}
	node, evicted, log, policyName := s.node, nd.Status.Evicted, s.log, nd.Status.Policy
	s.afterWrite(func() {
		r.drainEvent(nd, node, corev1.EventTypeNormal, v1alpha1.EventDrained, "Drain", "node %s drained: %d pod(s) left in %s",
			nd.Spec.NodeName, evicted, took.Round(time.Second))
		metrics.DrainsTotal.WithLabelValues(string(v1alpha1.PhaseDrained), policyName).Inc()
		metrics.DrainDuration.WithLabelValues(policyName).Observe(took.Seconds())
		log.Info("drained node", "node", klogRef(nd.Spec.NodeName), "evicted", evicted, "took", took)
	})
	return reconcile.Result{}, nil
}
