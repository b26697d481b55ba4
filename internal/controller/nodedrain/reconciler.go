// Package nodedrain is the NodeDrain controller: it cordons the node, lets
// evacuations finish, evicts the pods the planner says must leave through the
// eviction queue, and reports progress; when the last requester leaves it
// undoes exactly what it did.
package nodedrain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
)

// RBAC of vacate-controller, generated into config/rbac by `make generate`.
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains,verbs=get;list;watch;update;patch;manage
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vacate.dev,resources=nodedrains/finalizers,verbs=update
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update,namespace=vacate-system,resourceNames=vacate-controller
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=vacate-system
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create,namespace=vacate-system,resourceNames=vacate-controller

// Reconciler reconciles NodeDrains. It keeps no request state: every pass
// recomputes from the cluster; the eviction queue and the gates are caches
// that passes refill.
type Reconciler struct {
	Client ctrl.Client
	// APIReader reads around the cache, for decisions that must not act on
	// a stale copy (undo reads the node it may uncordon); nil uses Client.
	APIReader ctrl.Reader
	Clock     clock.WithDelayedExecution
	Events    events.EventRecorder
	Evictions *eviction.Queue
	// Hooks runs the pods' HTTP evacuation hooks in the background.
	Hooks *hook.Prober
	// AllowLoopbackHooks lets hooks call loopback addresses (development
	// clusters only: --allow-loopback-hooks).
	AllowLoopbackHooks bool
	// Workers is how many drains' passes run at once (--drain-workers);
	// 0 means one. A drain's passes never run concurrently with each other.
	Workers int

	// gates are what is remembered of the endpoint-aware pods taken out
	// of service (gates.go); which evictions are underway is the queue's
	// to say. budgetMu lets one pass at a time compute the PDBs' budgets
	// and queue what they let through (budget.go).
	gates    gates
	budgetMu sync.Mutex
	// waiters are the drains waiting on each PDB's budget (budget.go).
	waiters pdbWaiters
	// surgeRefused are the refused creates of replacements (surge.go).
	surgeRefused surgeRefusals
	blocked      reasonGauge // vacate_pods_blocked
	// writes spaces out status writes that change only progress.
	writes statusWrites
	// Wake receives the NodeDrains to requeue after an eviction outcome.
	Wake chan event.GenericEvent

	// Pods reads a node's pods from the cache (index.CachedNodePods); unset,
	// they are listed from Client.
	Pods index.NodePods
	// guards are the cluster's PodDisruptionBudgets as the PDB watch last
	// saw them (pdbHandler keeps them): a pass plans with them instead of
	// listing and indexing every PDB of the cluster.
	guards drain.Guards

	// annotationWarnings: pods already warned that their annotations are ignored.
	annotationWarnings warnedPods
}

// NewReconciler makes a reconciler that queues its evictions on the
// eviction queue (a component of its own, run by the manager). The queue
// reports back through OnOutcome and MayEvict, which the caller hands it
// (controllers.go).
func NewReconciler(c ctrl.Client, clk clock.WithDelayedExecution, rec events.EventRecorder, evictions *eviction.Queue) *Reconciler {
	r := &Reconciler{Client: c, Clock: clk, Events: rec, Wake: make(chan event.GenericEvent, 1024), Evictions: evictions}
	r.blocked = newReasonGauge(metrics.PodsBlocked)
	r.Hooks = hook.NewProber(r.wake)
	r.Hooks.Check = r.stillTheTarget
	return r
}

// fresh is the reader for decisions that must see the latest state.
func (r *Reconciler) fresh() ctrl.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// scope is what one pass knows about one drain.
type scope struct {
	drain  *v1alpha1.NodeDrain
	node   *corev1.Node
	policy policy.Policy
	now    time.Time
	// since is the PDB waiters' counter when the pass started (budget.go).
	since uint64
	log   klog.Logger
	// evac is what the evacuate stage learned, for evict and finalize.
	evac evacState
	// plan is the pass's plan of the node's pods (see Reconciler.plan);
	// honoured are the namespaces whose pods' surge annotation counts
	// (honouredNamespaces), read with it.
	plan     *drain.Plan
	honoured map[string]bool
	// steps are the pods the planner evicts with their next steps
	// (nextSteps), for the stages that take them.
	steps []podStep
	// gated are the blockers of endpoint-aware pods out of service that
	// wait for their endpoints (endpoints.go).
	gated map[types.UID]v1alpha1.Blocker
	// surge is the drain's replacements, read once per pass, and surging
	// the blockers of pods that wait on theirs (surge.go).
	surge   *surgePass
	surging map[types.UID]v1alpha1.Blocker
	// timeLeft bounds the wait of an evicting drain for its next pass: the
	// resync, or its timeout or deadline if sooner (timeouts).
	timeLeft time.Duration
	// replacing is how many of the drain's replacements are not handed
	// over or removed yet (replacements).
	replacing int
	// recheck, when set, bounds the wait for the next pass (an
	// endpoint-aware pod's settle time or timeout).
	recheck time.Duration
	// stop ends the pass after the current stage, with nothing to requeue:
	// the drain reached an end (Failed) and waits for a change.
	stop bool
	// found is what the pass found, for the status it writes (status.go).
	found facts
	// newRefusals are the blockers of pods whose eviction the API server
	// newly refused (setPodCounts): each is a Warning event.
	newRefusals []podBlocker
	// onWritten are the side effects of a transition (events, metrics): they
	// happen only once the status recording it was written. A pass working
	// from a stale cache loses the optimistic lock and has no side effects.
	onWritten []func()
}

// afterWrite defers a transition's side effect until the status is written.
func (s *scope) afterWrite(f func()) { s.onWritten = append(s.onWritten, f) }

type stage func(context.Context, *scope) (reconcile.Result, error)

// Reconcile dispatches the stages of a drain, or its undo.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	nd := &v1alpha1.NodeDrain{}
	if err := r.Client.Get(ctx, req.NamespacedName, nd); err != nil {
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	s := &scope{drain: nd, now: r.Clock.Now(), since: r.waiters.now(), log: log.FromContext(ctx).WithValues("nodeDrain", klog.KObj(nd))}
	before := nd.DeepCopy()
	defer func() {
		if p := recover(); p != nil {
			panic(p) // a pass that broke off halfway records nothing
		}
		s.setStatus()
		r.reportPods(s)
		now := time.Now()
		progress := !equality.Semantic.DeepEqual(before.Status, nd.Status) && len(s.onWritten) == 0 && progressOnly(&before.Status, &nd.Status)
		if progress {
			if wait := r.writes.wait(nd.UID, now); wait > 0 {
				name := nd.Name
				r.writes.holdBack(nd.UID, wait, func() { r.wake(name) }) // the progress is written then
				return
			}
		}
		written, perr := r.patchStatus(ctx, before, nd)
		if errors.Is(perr, errStatusConflict) {
			// The pass read an older version than the server's: it runs
			// again. Its watch event may not bring it: the newer version
			// may be this controller's own progress write, whose event
			// wakes no pass (progressUpdate).
			res.RequeueAfter, perr = requeue.ConflictRetry, nil
		}
		if perr != nil {
			err = errors.Join(err, perr)
		}
		if written {
			r.writes.wrote(nd.UID, now)
			for _, f := range s.onWritten {
				f()
			}
		}
	}()
	nd.Status.ObservedGeneration = nd.Generation

	if !nd.DeletionTimestamp.IsZero() || len(nd.Spec.Requesters) == 0 {
		return r.undo(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(nd, v1alpha1.FinalizerRestore) {
		if err := r.patchFinalizer(ctx, nd, controllerutil.AddFinalizer); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer to NodeDrain %s: %w", nd.Name, err)
		}
	}
	nd.Status.Deadline = v1alpha1.EarliestDeadline(nd.Spec.Requesters)
	if ended, err := r.ended(ctx, s); ended || err != nil {
		return reconcile.Result{}, err // undo when the requesters leave
	}
	nd.Status.Mode, nd.Status.UndoStartTime = nd.Mode(), nil
	recordRun(nd)
	for _, st := range []stage{r.loadNode, r.admitted, r.cordon, r.evacuate, r.timeouts, r.keepDaemonSetsOff, r.replacements,
		r.nextSteps, r.endpointAware, r.surgePods, r.evict, r.finalize} {
		res, err := st(ctx, s)
		if err != nil || !res.IsZero() || s.stop {
			return res, err
		}
	}
	return reconcile.Result{}, nil
}

// ended reports whether the drain reached an end and stays there: Drained
// or Failed, for the node it ran on, and asked nothing its run did not
// answer. It runs again (runAgain) when what it is asked changed: its mode
// went up (node deletion raises Maintenance to Decommission), or, for a
// Failed drain, a requester joined or a requester's deadline changed. A
// Drained drain is kept empty while anyone asks: pods that must leave and
// turn up on the node afterwards (they tolerate the cordon, or were bound
// to it by name) run it again too; a requester that joins a Drained drain
// whose node is empty is answered at once. A drain whose node was replaced
// by another of the same name starts over there (loadNode); one whose node
// is gone stays as it ended.
func (r *Reconciler) ended(ctx context.Context, s *scope) (bool, error) {
	nd := s.drain
	if !nd.Ended() {
		return false, nil
	}
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return true, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	r.warnNoExecute(s, node) // an ended drain still says what the taint does
	if nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID) {
		return false, nil
	}
	switch reason, why := nd.RequestChange(); {
	case reason == v1alpha1.ReasonModeRaised, reason != "" && nd.Status.Phase == v1alpha1.PhaseFailed:
		r.runAgain(s, reason, why)
		return false, nil
	case nd.Status.Phase == v1alpha1.PhaseDrained:
		arrived, err := r.podsArrived(ctx, s, node)
		if err != nil {
			return true, err
		}
		if arrived != "" {
			r.runAgain(s, v1alpha1.ReasonPodsArrived, arrived)
			return false, nil
		}
	}
	recordRun(nd) // nothing new: the run answers the requesters there are now
	return true, nil
}

// recordRun records the requesters the drain's current run answers.
func recordRun(nd *v1alpha1.NodeDrain) {
	if nd.Status.Run == nil {
		nd.Status.Run = &v1alpha1.DrainRun{}
	}
	nd.Status.Run.Requesters = v1alpha1.RunRequestersOf(nd.Spec.Requesters)
}

// podsArrived says which pods that must leave are on a Drained drain's
// node ("" when none), planned as the drain plans them. A drain whose
// policy cannot be resolved now stays as it is: loadNode would hold it.
func (r *Reconciler) podsArrived(ctx context.Context, s *scope, node *corev1.Node) (string, error) {
	p, err := policy.Resolve(ctx, r.Client, s.drain.Spec.PolicyName, node)
	switch {
	case policy.IsNotFound(err), policy.IsAmbiguous(err):
		return "", nil
	case err != nil:
		return "", err
	}
	s.node = node
	s.policy, _ = p.WithOverrides(s.drain.Spec.Requesters)
	plan, err := r.plan(ctx, s)
	if err != nil || plan.Completed() {
		return "", err
	}
	var pods []string
	for _, d := range plan.Decisions {
		if d.Action != drain.Skip {
			pods = append(pods, d.Key())
		}
	}
	return fmt.Sprintf("%d pod(s) that must leave turned up on the node after it was Drained: %s", len(pods), listSome(pods, 5)), nil
}

// runAgain starts a new run of a drain that had ended, saying why. The
// run goes through admission again (the admission controller admits it
// within the policy's concurrency, first by its request time), its
// timeouts count from its new admission, and it is a new run in the HTTP
// evacuation protocol (an app's answer to the last run is not this one's).
// What the last run did stays: the cordon, the Evacuations (a Completed one
// whose spec does not change stays Completed), the hooks called (a cancel
// still reaches them), the counts.
func (r *Reconciler) runAgain(s *scope, reason, why string) {
	nd := s.drain
	st := &nd.Status
	was := st.Phase
	s.log.Info("running the drain again", "was", was, "reason", reason, "detail", why)
	st.QueuePosition = 0
	st.StartTime, st.CompletionTime = nil, nil
	st.RequestTime = &metav1.Time{Time: s.now}
	st.RunID = ""
	st.Run = &v1alpha1.DrainRun{Reason: reason, Message: condition.Cap(why)}
	msg := fmt.Sprintf("running again after it was %s: %s", was, why)
	s.found.again = &ending{reason, msg}
	s.afterWrite(func() {
		r.Events.Eventf(nd, nil, corev1.EventTypeNormal, v1alpha1.EventRunningAgain, "Drain", "%s", condition.Cap(msg))
	})
}

// patchFinalizer adds or removes vacate's finalizer. It patches a copy and
// takes back only the metadata, so the status this pass computed in memory is
// not replaced by the server's copy before patchStatus writes it.
func (r *Reconciler) patchFinalizer(ctx context.Context, nd *v1alpha1.NodeDrain, change func(ctrl.Object, string) bool) error {
	obj := nd.DeepCopy()
	patch := ctrl.MergeFrom(obj.DeepCopy())
	change(obj, v1alpha1.FinalizerRestore)
	if err := r.Client.Patch(ctx, obj, patch); err != nil {
		return err
	}
	nd.Finalizers, nd.ResourceVersion = obj.Finalizers, obj.ResourceVersion
	return nil
}

// errStatusConflict: the status was not written, the drain changed since
// the pass read it; the pass must run again.
var errStatusConflict = errors.New("the NodeDrain changed since it was read")

// patchStatus writes the status once, only if it changed, with an
// optimistic lock; on a conflict it returns errStatusConflict. It reports
// whether it wrote.
func (r *Reconciler) patchStatus(ctx context.Context, before, after *v1alpha1.NodeDrain) (bool, error) {
	if !after.DeletionTimestamp.IsZero() && len(after.Finalizers) == 0 {
		return true, nil // released: the object is going away with what it recorded
	}
	if equality.Semantic.DeepEqual(before.Status, after.Status) {
		return false, nil
	}
	// The lock is against the latest version we know of, including this
	// pass's own writes (finalizer changes); anyone else's write conflicts.
	before = before.DeepCopy()
	before.ResourceVersion = after.ResourceVersion
	err := r.Client.Status().Patch(ctx, after, ctrl.MergeFromWithOptions(before, ctrl.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return false, nil // gone: nothing more to record
	}
	if apierrors.IsConflict(err) {
		return false, errStatusConflict
	}
	if err != nil {
		return false, fmt.Errorf("patching status of NodeDrain %s: %w", after.Name, err)
	}
	return true, nil
}

// wake queues a pass of the named drain.
func (r *Reconciler) wake(name string) {
	ev := event.GenericEvent{Object: &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	select {
	case r.Wake <- ev:
	default: // the channel is full of wake-ups; the resync covers the rest
	}
}

// podsOnNode reads the node's pods from the informer cache (r.Pods, or a
// List of r.Client when unset).
func (r *Reconciler) podsOnNode(ctx context.Context, node string) ([]*corev1.Pod, error) {
	pods, err := r.Pods.Or(r.Client)(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	return pods, nil
}

// reasonGauge keeps a gauge by reason as the sum over drains, such as
// vacate_pods_blocked{reason} and vacate_drains_queued{reason}.
type reasonGauge struct {
	mu      sync.Mutex
	vec     *prometheus.GaugeVec
	byDrain map[string]map[string]int
}

func newReasonGauge(vec *prometheus.GaugeVec) reasonGauge {
	return reasonGauge{vec: vec, byDrain: map[string]map[string]int{}}
}

// set replaces a drain's reasons (none clears it) and republishes the sums.
func (g *reasonGauge) set(drainName string, reasons ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	counts := map[string]int{}
	for _, r := range reasons {
		counts[r]++
	}
	if len(counts) == 0 {
		delete(g.byDrain, drainName)
	} else {
		g.byDrain[drainName] = counts
	}
	total := map[string]int{}
	for _, c := range g.byDrain {
		for reason, n := range c {
			total[reason] += n
		}
	}
	g.vec.Reset()
	for reason, n := range total {
		g.vec.WithLabelValues(reason).Set(float64(n))
	}
}
