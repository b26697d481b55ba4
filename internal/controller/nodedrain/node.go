package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/policy"
)

// loadNode finds the node and its policy; without either, or with more than
// one policy that selects the node, the drain waits (hold), as the admission
// controller holds it.
func (r *Reconciler) loadNode(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	if apierrors.IsNotFound(err) {
		r.hold(s)
		s.found.missing = true
		return reconcile.Result{RequeueAfter: requeue.Resync}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	s.node = node
	r.warnNoExecute(s, node)
	if nd.Status.NodeUID == "" {
		nd.Status.NodeUID = string(node.UID)
	} else if nd.Status.NodeUID != string(node.UID) {
		return r.nodeReplaced(ctx, s)
	}
	p, err := policy.Resolve(ctx, r.Client, nd.Spec.PolicyName, node)
	switch {
	case policy.IsNotFound(err), policy.IsAmbiguous(err):
		r.hold(s)
		return reconcile.Result{RequeueAfter: requeue.Resync}, nil
	case err != nil:
		return reconcile.Result{}, err
	}
	// The requesters' overrides (kubectl drain's flags), each allowed by the
	// admission policy vacate-nodedrains when it was set.
	s.policy, _ = p.WithOverrides(nd.Spec.Requesters)
	nd.Status.Policy = p.Name
	return reconcile.Result{}, nil
}

// nodeReplaced starts the drain over on a node that was deleted and created
// again under the same name: it is another machine. Nothing recorded for the
// old one applies to it: the Evacuations of this drain are deleted without a
// cancel (their node is gone, and what was moved off it stays moved), HTTP
// hook conversations and counts are dropped, and the admission is given up.
// That is the admission controller's to do (it holds the drain with
// NodeReplaced): while the drain is still admitted this pass records
// nothing of the new node and comes back. Once it is not, the pass records
// the new node's UID, and admission takes the drain like a new one.
func (r *Reconciler) nodeReplaced(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd, node := s.drain, s.node
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Evacuations: %w", err)
	}
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName != nd.Spec.NodeName || ev.Spec.DrainUID != string(nd.UID) ||
			(!ev.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel)) {
			continue
		}
		s.log.Info("deleting an Evacuation of the node this drain's node replaced", "evacuation", klogRef(ev.Name))
		if err := r.letGo(ctx, ev, false); err != nil {
			return reconcile.Result{}, fmt.Errorf("deleting Evacuation %s of the replaced node: %w", ev.Name, err)
		}
	}
	r.hold(s)
	if nd.Admitted() {
		// Never under the old node's admission: wait until admission gave
		// it up (its write of Admitted brings a pass; this one is a retry).
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
	}
	_, msg := nd.NodeHold(node)
	st := &nd.Status
	st.NodeUID = string(node.UID)
	st.Hooks, st.Total, st.Evicted, st.Remaining, st.Progress, st.CompletionTime = nil, 0, 0, 0, "", nil
	st.HooksOmitted, st.HookCalls, st.RunID = 0, nil, "" // a new run on the new node
	s.found.replaced = true                              // its conditions are the old node's
	s.afterWrite(func() {
		r.drainEvent(nd, node, corev1.EventTypeWarning, v1alpha1.EventNodeReplaced, "Drain", "%s", msg)
	})
	return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
}
