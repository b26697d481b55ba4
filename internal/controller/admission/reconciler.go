// Package admission is the admission controller: one scheduler per
// DrainPolicy decides which of the policy's requested drains start, and in
// what order the others wait. It reads the policy's drains, gives back the
// nodes of drains waiting for a maintenance window, cordons the drains
// that may start soon (all of a batch before any of them evicts), asks the
// pure planner (internal/schedule) for verdicts and writes them to the
// NodeDrains: Admitted=True, or False with the reason and the place in the
// queue. Drains that belong to no queue (their node is missing or was
// replaced, their policy is missing or unclear) have a work item of their
// own, HeldKey, whose pass holds them with the reason and gives up any
// admission they had. This controller alone writes Admitted; the NodeDrain
// controller only reads it.
//
// Nothing that decides admission lives only in memory: every pass
// recomputes from the cluster, and an admission is written only after a
// read of the drains around the cache confirmed it (a cache that lags
// behind this controller's own writes never lets a pass take a slot twice).
// After a restart or a change of leader the same drains are admitted in the
// same order.
package admission

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/policy"
)

// RBAC of the admission controller, generated into config/rbac.
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch

// BuiltinKey is the queue of drains under built-in defaults (no
// DrainPolicy governs their nodes). No DrainPolicy can have this name.
const BuiltinKey = "(built-in defaults)"

// Reconciler decides admission, one DrainPolicy (one queue) per pass.
type Reconciler struct {
	Client client.Client
	// APIReader reads the drains around the cache before any admission is
	// written; nil uses Client (tests only).
	APIReader client.Reader
	// Pods reads a node's pods from the cache (index.CachedNodePods); nil
	// lists them from Client.
	Pods   index.NodePods
	Clock  clock.PassiveClock
	Events events.EventRecorder
}

// Reconcile computes the queue of one policy and carries its verdicts out:
// it reads the queue (queue.go), decides (plan.go), gives back or cordons
// the waiting drains' nodes (cordons.go), confirms any admission on a read
// around the cache, and writes the verdicts (write.go). The pass of HeldKey
// is held.go's.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.Name
	logger := log.FromContext(ctx).WithValues("queue", key)
	if key == HeldKey {
		return r.hold(ctx, logger)
	}
	pol, found, err := r.resolve(ctx, key)
	if err != nil || !found {
		return reconcile.Result{}, err // drains naming a missing policy are held (HeldKey)
	}
	now := r.Clock.Now()
	q, err := r.read(ctx, r.Client, key, pol, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	// The gauge counts what this pass leaves: the queue it ends with (the
	// fresh read, when it admits), with the verdicts it wrote.
	defer func() { publishQueued(q.all) }()
	if len(q.waiting) == 0 {
		return reconcile.Result{}, nil
	}
	p := q.plan()
	if res, err := r.giveBack(ctx, q, p); err != nil || !res.IsZero() {
		return res, err
	}
	if res, err := r.cordonBatch(ctx, q, p); err != nil || !res.IsZero() {
		return res, err
	}
	if p.admits() {
		// Confirm against the drains as the API server has them: the
		// cache may not show an admission this controller just wrote.
		fresh, err := r.read(ctx, r.fresh(), key, pol, now)
		if err != nil {
			return reconcile.Result{}, err
		}
		fresh.cordonedAs(q)
		q, p = fresh, fresh.plan().only(q.waiting)
	}
	if res, err := r.write(ctx, logger, q, p); err != nil || !res.IsZero() {
		return res, err
	}
	return reconcile.Result{RequeueAfter: p.wake}, nil
}

func (r *Reconciler) fresh() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// resolve reads the policy of a queue; found is false when it is gone.
func (r *Reconciler) resolve(ctx context.Context, key string) (policy.Policy, bool, error) {
	if key == BuiltinKey {
		p, err := policy.FromSpec("", v1alpha1.DrainPolicySpec{})
		return p, true, err
	}
	dp := &v1alpha1.DrainPolicy{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: key}, dp); apierrors.IsNotFound(err) {
		return policy.Policy{}, false, nil
	} else if err != nil {
		return policy.Policy{}, false, fmt.Errorf("reading DrainPolicy %s: %w", key, err)
	}
	p, err := policy.FromSpec(dp.Name, dp.Spec)
	if err != nil && p.Admission.ScheduleErr == nil {
		return policy.Policy{}, false, fmt.Errorf("reading DrainPolicy %s: %w", key, err)
	}
	return p, true, nil
}
