package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/cordon"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
)

// This file is what a pass does to the waiting drains' nodes before it
// writes any verdict: it gives back the nodes of drains that wait for a
// maintenance window (giveBack) and cordons the others, a batch whole
// before any of it starts (cordonBatch), taking a cordon back at once if
// its drain was cancelled meanwhile (stillWanted).

// giveBack uncordons the nodes of drains that wait for a window (that may
// be days), if admission cordoned them.
func (r *Reconciler) giveBack(ctx context.Context, q *queue, p *plan) (reconcile.Result, error) {
	for _, m := range q.waiting {
		if !p.verdicts[m.drain.UID].gated {
			continue
		}
		changed, err := cordon.Uncordon(ctx, r.Client, m.node, m.drain)
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		if changed {
			r.Events.Eventf(m.drain, m.node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Restore",
				"uncordoned node %s while its drain waits for a maintenance window", m.node.Name)
		}
	}
	return reconcile.Result{}, nil
}

// cordonBatch cordons every waiting drain that may start soon (not held by
// its schedule), so pods evicted by the drains admitted before it never
// land on it, and so a batch is cordoned whole before any of it evicts.
// The nodes are cordoned at once (atOnce): a batch of ten cordoned one
// after another took 0.6 of the 1.9 s from its request to its first
// eviction on a loaded API server (docs/performance.md).
func (r *Reconciler) cordonBatch(ctx context.Context, q *queue, p *plan) (reconcile.Result, error) {
	var soon []*member
	for _, m := range q.waiting {
		if !p.verdicts[m.drain.UID].gated {
			soon = append(soon, m)
		}
	}
	return atOnce(len(soon), func(i int) (reconcile.Result, error) {
		m := soon[i]
		changed, err := cordon.Cordon(ctx, r.Client, m.node, m.drain)
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil || !changed {
			return reconcile.Result{}, err
		}
		r.Events.Eventf(m.drain, m.node, corev1.EventTypeNormal, v1alpha1.EventCordoned, "Cordon", "cordoned node %s", m.node.Name)
		return r.stillWanted(ctx, m)
	})
}

// atOnceLimit bounds the API calls atOnce has in flight.
const atOnceLimit = 16

// atOnce runs f(0) to f(n-1) at once (at most atOnceLimit at a time) and
// returns their errors joined, or else the soonest requeue any asked for.
func atOnce(n int, f func(i int) (reconcile.Result, error)) (reconcile.Result, error) {
	results := make([]reconcile.Result, n)
	errs := make([]error, n)
	slots := make(chan struct{}, atOnceLimit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			results[i], errs[i] = f(i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return reconcile.Result{}, err
	}
	out := reconcile.Result{}
	for _, res := range results {
		if res.RequeueAfter > 0 && (out.RequeueAfter == 0 || res.RequeueAfter < out.RequeueAfter) {
			out.RequeueAfter = res.RequeueAfter
		}
	}
	return out, nil
}

// stillWanted takes back a cordon this pass just made if the drain was
// cancelled meanwhile. The pass decided from a read made before the cordon;
// a cancel in between may have run its undo, which reads the node fresh,
// before the cordon landed, and so found nothing to give back. Read after
// the cordon, a drain still running is cancelled later, and its undo sees
// the cordon; one cancelled is undone here (an undo that also saw the
// cordon finds it gone, or loses the optimistic lock and reads again).
func (r *Reconciler) stillWanted(ctx context.Context, m *member) (reconcile.Result, error) {
	nd := &v1alpha1.NodeDrain{}
	err := r.fresh().Get(ctx, client.ObjectKeyFromObject(m.drain), nd)
	switch {
	case err == nil && nd.UID == m.drain.UID && nd.Running():
		return reconcile.Result{}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading NodeDrain %s after cordoning its node: %w", m.drain.Name, err)
	}
	// No later pass would see this drain again: retry a conflict here, on
	// a fresh read of the node (kwok and the kubelet write it often).
	node := m.node
	changed := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var uerr error
		if changed, uerr = cordon.Uncordon(ctx, r.Client, node, m.drain); !apierrors.IsConflict(uerr) {
			return uerr
		}
		latest := &corev1.Node{}
		if err := r.fresh().Get(ctx, client.ObjectKeyFromObject(m.node), latest); err != nil {
			return err
		}
		node = latest
		return uerr
	})
	if apierrors.IsNotFound(err) {
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if changed {
		r.Events.Eventf(m.drain, node, corev1.EventTypeNormal, v1alpha1.EventRestored, "Restore",
			"uncordoned node %s: its drain was cancelled while admission cordoned it", node.Name)
	}
	return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil // the queue changed: decide again
}
