package admission

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/policy"
)

// HeldKey is the work item of the drains that belong to no queue: their
// node is missing or was replaced, or their policy is missing or unclear
// (Held). No DrainPolicy can have this name.
const HeldKey = "(held)"

// Held says why a drain belongs to no queue and waits, or "" when it
// belongs to one. node is the drain's node, nil when it does not exist;
// policies are every DrainPolicy. In order: its node is missing or another
// node of the same name (NodeDrain.NodeHold); the DrainPolicy it names
// does not exist (ReasonPolicyNotFound); more than one DrainPolicy selects
// its node, or a selector cannot be read (ReasonAmbiguousPolicy). The
// messages are those of policy.Resolve, which the NodeDrain controller
// asks: both controllers see the same causes.
func Held(nd *v1alpha1.NodeDrain, node *corev1.Node, policies []v1alpha1.DrainPolicy) (reason, message string) {
	if reason, msg := nd.NodeHold(node); reason != "" {
		return reason, msg
	}
	if name := nd.Spec.PolicyName; name != "" {
		if !slices.ContainsFunc(policies, func(dp v1alpha1.DrainPolicy) bool { return dp.Name == name }) {
			return v1alpha1.ReasonPolicyNotFound, (&policy.NotFoundError{Name: name}).Error()
		}
		return "", ""
	}
	if _, _, err := policy.Select(node.Labels, policies); err != nil {
		return v1alpha1.ReasonAmbiguousPolicy, err.Error()
	}
	return "", ""
}

// hold is the pass of HeldKey. Every running drain that Held says belongs
// to no queue waits with that reason: Admitted=False, no start time, no
// place in a queue. An admitted one gives its admission up here (until
// then it counts in every queue it may belong to, see member): it evicts
// nothing more (the NodeDrain controller stops its passes for the same
// causes), the queues that counted it get the slot back, and it is admitted
// again like a new drain once the cause clears and its queue takes it.
func (r *Reconciler) hold(ctx context.Context, logger klog.Logger) (reconcile.Result, error) {
	list := &v1alpha1.NodeDrainList{}
	if err := r.Client.List(ctx, list); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing NodeDrains: %w", err)
	}
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	defer func() { publishQueued(list.Items) }()
	now := r.Clock.Now()
	held, lost := false, false
	for i := range list.Items {
		nd := &list.Items[i]
		if !nd.Running() {
			continue
		}
		node, err := r.nodeOf(ctx, nd)
		if err != nil {
			return reconcile.Result{}, err
		}
		reason, msg := Held(nd, node, policies.Items)
		if reason == "" {
			continue
		}
		held = true
		admitted := nd.Admitted()
		written, err := r.patch(ctx, nd, func(nd *v1alpha1.NodeDrain) {
			forRun(nd, now)
			wait(nd, 0, reason, msg, now)
		})
		switch {
		case err != nil:
			return reconcile.Result{}, err
		case !written:
			lost = true // decided again with what changed
		case admitted:
			logger.Info("giving up the admission of a drain", "node", nd.Spec.NodeName, "reason", reason, "detail", msg)
		}
	}
	switch {
	case lost:
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
	case held:
		return reconcile.Result{RequeueAfter: requeue.Resync}, nil
	}
	return reconcile.Result{}, nil
}

// nodeOf reads the drain's node from the cache; nil when it does not exist.
func (r *Reconciler) nodeOf(ctx context.Context, nd *v1alpha1.NodeDrain) (*corev1.Node, error) {
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	return node, nil
}

// wait makes the drain wait: no start time, at position in its queue (0:
// in none), Admitted=False with the reason and message. Its phase is the
// NodeDrain controller's to write (Pending, on its pass that this write
// brings).
func wait(nd *v1alpha1.NodeDrain, position int, reason, msg string, now time.Time) {
	st := &nd.Status
	st.QueuePosition = int32(position)
	st.StartTime = nil
	setAdmitted(nd, false, reason, msg, now)
}
