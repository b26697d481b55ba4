package admission

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// This file writes what a pass decided into the drains' status, each
// drain under an optimistic lock (patch, which the pass of HeldKey uses
// too): the verdicts, admissions first (write, record), and the Admitted
// condition, which only this controller sets (setAdmitted). It also
// recounts the queue gauge from the status written (publishQueued).

// write records the verdicts in the drains' status, admissions first and
// in the planner's order (the drains of one complete batch at once,
// together), then the waits at once, each under an optimistic lock: a
// drain that changed meanwhile is decided again by the next pass.
func (r *Reconciler) write(ctx context.Context, logger klog.Logger, q *queue, p *plan) (reconcile.Result, error) {
	byUID := map[types.UID]*member{}
	for _, m := range q.waiting {
		byUID[m.drain.UID] = m
	}
	res := reconcile.Result{}
	for _, run := range together(p.order, p.complete) {
		again, err := atOnce(len(run), func(i int) (reconcile.Result, error) {
			m, v := byUID[run[i]], p.verdicts[run[i]]
			written, err := r.record(ctx, q, m, v)
			if err != nil || !written {
				return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, err // decided again with what changed
			}
			waited := q.now.Sub(requestTime(m.drain, q.now))
			metrics.Admissions.Inc()
			metrics.QueueWait.Observe(waited.Seconds())
			logger.Info("starting drain", "node", m.node.Name, "policy", q.describe(m, p), "queued", waited.Round(time.Millisecond))
			return reconcile.Result{}, nil
		})
		if err != nil {
			return reconcile.Result{}, err
		}
		if again.RequeueAfter > 0 {
			res.RequeueAfter = again.RequeueAfter
		}
	}
	// The waits at once: their order decides nothing (each carries its
	// position), and a pass that writes them one after another makes the
	// next pass, which may admit, wait for it.
	var waits []*member
	for _, m := range q.waiting {
		if v, ok := p.verdicts[m.drain.UID]; ok && !v.Admit {
			waits = append(waits, m)
		}
	}
	if _, err := atOnce(len(waits), func(i int) (reconcile.Result, error) {
		_, err := r.record(ctx, q, waits[i], p.verdicts[waits[i].drain.UID])
		return reconcile.Result{}, err
	}); err != nil {
		return reconcile.Result{}, err
	}
	return res, nil
}

// record writes one verdict; it reports false when the drain changed
// meanwhile (a conflict) or is gone.
func (r *Reconciler) record(ctx context.Context, q *queue, m *member, v verdict) (bool, error) {
	return r.patch(ctx, m.drain, func(nd *v1alpha1.NodeDrain) {
		forRun(nd, q.now)
		st := &nd.Status
		if !v.Admit {
			wait(nd, v.Position, v.Reason, v.Message, q.now)
			return
		}
		st.QueuePosition = 0
		if st.StartTime == nil {
			st.StartTime = &metav1.Time{Time: q.now}
		}
		setAdmitted(nd, true, v1alpha1.ReasonAdmitted, v.Message, q.now)
	})
}

// forRun makes admission's fields the drain's current run's: a new run
// (the NodeDrain controller moved runNumber on) does not carry the last
// run's admission over; it starts with its own request time and no start
// time.
func forRun(nd *v1alpha1.NodeDrain, now time.Time) {
	st := &nd.Status
	if !nd.AdmissionCurrent() {
		st.AdmittedRun, st.RequestTime, st.StartTime = st.RunNumber, nil, nil
	}
	if st.RequestTime == nil {
		st.RequestTime = &metav1.Time{Time: now}
	}
}

// patch writes what change does to the drain's status, under an optimistic
// lock, and keeps it in nd (what the queue gauge counts at the end of the
// pass). It reports false when the drain changed meanwhile (a conflict) or
// is gone; true also when there was nothing to write.
func (r *Reconciler) patch(ctx context.Context, nd *v1alpha1.NodeDrain, change func(*v1alpha1.NodeDrain)) (bool, error) {
	after := nd.DeepCopy()
	change(after)
	if equality.Semantic.DeepEqual(nd.Status, after.Status) {
		return true, nil
	}
	err := r.Client.Status().Patch(ctx, after, client.MergeFromWithOptions(nd.DeepCopy(), client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recording the admission of NodeDrain %s: %w", nd.Name, err)
	}
	nd.Status = after.Status
	return true, nil
}

// setAdmitted sets the Admitted condition, which only this controller writes.
func setAdmitted(nd *v1alpha1.NodeDrain, admitted bool, reason, msg string, now time.Time) {
	status := metav1.ConditionFalse
	if admitted {
		status = metav1.ConditionTrue
	}
	condition.Set(&nd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: nd.Generation, LastTransitionTime: metav1.NewTime(now)})
}

// publishQueued sets vacate_drains_queued from the drains' status: every
// requested drain not admitted, by the reason it waits.
func publishQueued(all []v1alpha1.NodeDrain) {
	counts := map[string]int{}
	for i := range all {
		nd := &all[i]
		if !nd.Running() {
			continue
		}
		if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted); c != nil && c.Status == metav1.ConditionFalse {
			counts[c.Reason]++
		}
	}
	metrics.DrainsQueued.Reset()
	for reason, n := range counts {
		metrics.DrainsQueued.WithLabelValues(reason).Set(float64(n))
	}
}
