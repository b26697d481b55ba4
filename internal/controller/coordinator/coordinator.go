// Package coordinator is vacate's coordinator of Kubernetes 1.37's
// EvictionRequest API (KEP-4563, lifecycle.k8s.io/v1alpha1): the role of
// upstream's eviction-request controller, which 1.37 does not ship. For each
// pod that EvictionRequests target it keeps one Eviction, gives its
// responders their turns one at a time (internal/evictionrequest.Next
// decides), and, when the imperative evictor's turn comes, evicts the pod
// through vacate's eviction queue, so the PodDisruptionBudgets, the rate
// limits and the per-node bounds apply as they do for a drain. All it knows
// is in the objects: a restarted or newly elected controller goes on from
// them.
//
// It trusts EvictionRequests only, never an Eviction's recorded requesters:
// an Eviction that no request wants is cancelled, whoever wrote it.
package coordinator

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/controller/scoped"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
)

// +kubebuilder:rbac:groups=lifecycle.k8s.io,resources=evictionrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=lifecycle.k8s.io,resources=evictionrequests/status,verbs=update
// +kubebuilder:rbac:groups=lifecycle.k8s.io,resources=evictions,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=lifecycle.k8s.io,resources=evictions/status,verbs=update
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods;nodes;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch

// Consumer is the eviction queue's name for the coordinator's evictions
// (eviction.Request.For).
const Consumer = eviction.ForEvictionRequests

const (
	// heartbeatEvery is how often the evictor says it is still at work
	// while the pod's eviction waits (a PodDisruptionBudget, a throttled
	// API server): well within er.HeartbeatDeadline, after which its turn
	// would pass on and the Eviction fail.
	heartbeatEvery = 5 * time.Minute
	// refusedRecheck is how soon a pass looks again at a pod whose
	// eviction a PDB refused, to try again at once when the PDB allows.
	refusedRecheck = 5 * time.Second
)

// Reconciler coordinates the Eviction of one target pod per pass: the
// request's key is the pod's namespace and name.
type Reconciler struct {
	Client    client.Client
	Evictions *eviction.Queue
	Clock     clock.PassiveClock
	Events    events.EventRecorder
	// Wake brings a pass for a pod whose eviction call was answered.
	Wake chan event.GenericEvent
	// Hooks converses with the HTTP hooks of pods that declare vacate's
	// responder (responder.go); AllowLoopbackHooks as for drains.
	Hooks              *hook.Prober
	AllowLoopbackHooks bool
	// Pods is the pod cache: a requested pod's scope is watched while it
	// is asked for; unset, the manager's cache holds every pod.
	Pods *scoped.Cache[*corev1.Pod]
	// APIReader reads around the cache where a stale read would lose
	// something: the Evacuations an ended Eviction must undo, the Eviction
	// that owns an Evacuation.
	APIReader client.Reader
	// budgetWaits says, by pod (namespace/name), why the evictor has not
	// queued the pod's eviction: its PDBs' budget is taken by evictions
	// underway (the drains'), for the evictor's message.
	budgetWaits sync.Map
}

// budgetWait is an entry of Reconciler.budgetWaits.
type budgetWait struct {
	uid types.UID
	why string
}

// NewReconciler builds the coordinator over the shared eviction queue and
// registers its handlers there (before the queue runs).
func NewReconciler(c client.Client, clk clock.PassiveClock, rec events.EventRecorder, q *eviction.Queue) *Reconciler {
	r := &Reconciler{Client: c, APIReader: c, Evictions: q, Clock: clk, Events: rec, Wake: make(chan event.GenericEvent, 1024)}
	q.Handle(Consumer, r.OnOutcome, r.MayEvict)
	// A hook's answer needs no wake-up: a pass polls while vacate has the
	// turn (hookPoll).
	r.Hooks = hook.NewProber(func(string) {})
	r.Hooks.Check = r.stillTheTarget
	return r
}

// target is what a pass reads of one target pod.
type target struct {
	key      types.NamespacedName
	pod      *corev1.Pod // nil when there is none
	eviction *lifecyclev1alpha1.Eviction
	requests []lifecyclev1alpha1.EvictionRequest // every request naming the pod, of any UID
	// others are Evictions of the pod under other names than its own:
	// another coordinator's (vacate names each after its pod).
	others []string
}

// Reconcile brings the pod's Eviction one step on: creates it when a
// request wants the pod out, records its requesters, gives the next
// responder its turn, evicts when the evictor's turn comes, ends it when
// the pod goes or every requester withdraws, and reports the end on the
// requests.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	t, err := r.read(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(t.others) > 0 {
		// Another coordinator's: never fight over a pod.
		logf.FromContext(ctx).V(1).Info("leaving the pod to another coordinator's Eviction", "pod", req.NamespacedName, "evictions", t.others)
		return reconcile.Result{}, nil
	}
	if t.eviction != nil && (t.pod == nil || t.eviction.Spec.Target.Pod == nil || t.eviction.Spec.Target.Pod.UID != t.pod.UID) {
		return r.podGone(ctx, t)
	}
	if t.eviction == nil {
		r.budgetWaits.Delete(req.NamespacedName)
	}
	if t.pod == nil {
		return reconcile.Result{}, nil // nothing to evict; requests for it wait for their requesters
	}
	mine := forUID(t.requests, t.pod.UID)
	if t.eviction == nil {
		if !anyWants(mine) {
			return reconcile.Result{}, nil
		}
		return r.create(ctx, t.pod, mine)
	}
	if er.Final(t.eviction) {
		if res, pending, err := r.cancelHook(ctx, t.eviction, t.pod); pending || err != nil {
			return res, err
		}
		if res, pending, err := r.endEvacuations(ctx, t.eviction); pending || err != nil {
			return res, err
		}
		if err := r.releaseHook(ctx, t.eviction); err != nil {
			return reconcile.Result{}, err
		}
		r.Hooks.Forget(t.pod.UID)
		r.budgetWaits.Delete(t.key)
		if askedAgain(t.eviction, mine) {
			return r.replace(ctx, t.eviction)
		}
		return reconcile.Result{}, r.reportOn(ctx, mine, t.eviction)
	}
	if err := r.keepOwners(ctx, t.pod, t.eviction, mine); err != nil {
		return reconcile.Result{}, err
	}
	return r.step(ctx, t.pod, t.eviction, mine)
}

// read reads the pod, its Eviction and the requests that name it, from the
// cache.
func (r *Reconciler) read(ctx context.Context, key types.NamespacedName) (*target, error) {
	t := &target{key: key}
	evictions := &lifecyclev1alpha1.EvictionList{}
	if err := r.Client.List(ctx, evictions, client.InNamespace(key.Namespace), client.MatchingFields{TargetIndex: key.Name}); err != nil {
		return nil, fmt.Errorf("listing the Evictions of pod %s: %w", key, err)
	}
	for i := range evictions.Items {
		if ev := &evictions.Items[i]; ev.Name == key.Name {
			t.eviction = ev
		} else {
			t.others = append(t.others, ev.Name)
		}
	}
	list := &lifecyclev1alpha1.EvictionRequestList{}
	if err := r.Client.List(ctx, list, client.InNamespace(key.Namespace), client.MatchingFields{TargetIndex: key.Name}); err != nil {
		return nil, fmt.Errorf("listing EvictionRequests for pod %s: %w", key, err)
	}
	t.requests = list.Items
	if len(t.requests) > 0 && r.Pods != nil {
		// The pod's events wake its passes while it is asked for, on a
		// drained node or not (keepScope).
		if err := r.Pods.Want(ctx, scoped.Pod(key.Namespace, key.Name)); err != nil {
			return nil, err
		}
	}
	pod := &corev1.Pod{}
	switch err := r.Client.Get(ctx, key, pod); {
	case err == nil:
		t.pod = pod
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	return t, nil
}

// podGone ends the Eviction of a pod that is gone (deleted, or replaced by
// another of the same name): its responders' turns end and it records
// TargetEvicted; its requests report it. A final one makes room for the
// Eviction of the pod now under that name, when that one is asked for.
func (r *Reconciler) podGone(ctx context.Context, t *target) (reconcile.Result, error) {
	ev := t.eviction
	var uid types.UID
	if ev.Spec.Target.Pod != nil {
		uid = ev.Spec.Target.Pod.UID
	}
	theirs := forUID(t.requests, uid)
	r.Hooks.Forget(uid)
	r.budgetWaits.Delete(t.key)
	if !er.Final(ev) {
		if done := r.evictedByUs(ev, uid); done != ev {
			// The evictor's report first, in a write of its own: the API
			// server takes a responder's report only while it is Active,
			// and the end (the next pass) makes it not.
			return reconcile.Result{}, r.writeStatus(ctx, ev, done.Status)
		}
		next, _ := er.Next(er.Facts{Requests: theirs, Eviction: ev, Now: r.Clock.Now()})
		if err := r.writeStatus(ctx, ev, next); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.reportOn(ctx, theirs, ev)
	}
	if err := r.reportOn(ctx, theirs, ev); err != nil {
		return reconcile.Result{}, err
	}
	// The pod is gone: its hook has nothing to cancel; the provider gets the
	// node back.
	if res, pending, err := r.endEvacuations(ctx, ev); pending || err != nil {
		return res, err
	}
	if err := r.releaseHook(ctx, ev); err != nil {
		return reconcile.Result{}, err
	}
	if t.pod != nil && anyWants(forUID(t.requests, t.pod.UID)) {
		return r.replace(ctx, ev)
	}
	return reconcile.Result{}, nil
}

// evictedByUs is the Eviction with the evictor's turn Completed, when it
// had the turn and the eviction queue evicted the pod: the pod may be gone
// before the evictor's report of it was written (its end would then read
// as the evictor's turn Canceled). It is ev itself when there is nothing to
// report.
func (r *Reconciler) evictedByUs(ev *lifecyclev1alpha1.Eviction, uid types.UID) *lifecyclev1alpha1.Eviction {
	if !r.Evictions.State(uid).Evicted {
		return ev
	}
	status := *ev.Status.DeepCopy()
	rs := active(&status, er.Evictor)
	if rs == nil || rs.CompletionTime != nil {
		return ev
	}
	completeEvictor(rs, r.Clock.Now())
	out := ev.DeepCopy()
	out.Status = status
	return out
}

// create creates the pod's Eviction for the requests that name it; the next
// pass (its watch event) gives it its first status.
func (r *Reconciler) create(ctx context.Context, pod *corev1.Pod, requests []lifecyclev1alpha1.EvictionRequest) (reconcile.Result, error) {
	ev := er.Eviction(pod, requests)
	if err := r.Client.Create(ctx, ev); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return r.nameTaken(ctx, ev)
		}
		return reconcile.Result{}, fmt.Errorf("creating the Eviction of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	logf.FromContext(ctx).Info("coordinating the eviction of a pod", "pod", client.ObjectKeyFromObject(pod), "requesters", requesterNames(requests))
	r.Events.Eventf(ev, pod, corev1.EventTypeNormal, ReasonCoordinating, "Coordinate",
		"asked for by %v; responders in turn: %v", requesterNames(requests), responderOrder(er.TargetResponders(pod)))
	return r.step(ctx, pod, ev, requests)
}

// nameTaken answers a create refused because an Eviction has the pod's
// name: one the cache has not seen yet (a pass comes back soon), or one for
// another pod (another coordinator's naming), which is left alone: its
// watch brings a pass when it goes.
func (r *Reconciler) nameTaken(ctx context.Context, want *lifecyclev1alpha1.Eviction) (reconcile.Result, error) {
	have := &lifecyclev1alpha1.Eviction{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	if err != nil || have.Spec.Target.Pod == nil || have.Spec.Target.Pod.Name == want.Name {
		return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("an Eviction for another pod has this pod's name: leaving it alone",
		"eviction", client.ObjectKeyFromObject(have), "its pod", have.Spec.Target.Pod.Name)
	return reconcile.Result{}, nil
}

// replace deletes a final Eviction so that a new one can be made for the
// requests that ask again (only if it is still the one read).
func (r *Reconciler) replace(ctx context.Context, ev *lifecyclev1alpha1.Eviction) (reconcile.Result, error) {
	uid, rv := ev.UID, ev.ResourceVersion
	err := r.Client.Delete(ctx, ev, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return reconcile.Result{}, fmt.Errorf("deleting the ended Eviction %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
}

// keepOwners keeps the Eviction owned by every request for its pod (the
// garbage collector deletes it with the last one) and labelled with their
// requesters.
func (r *Reconciler) keepOwners(ctx context.Context, pod *corev1.Pod, ev *lifecyclev1alpha1.Eviction, requests []lifecyclev1alpha1.EvictionRequest) error {
	want := er.Eviction(pod, requests)
	if len(requests) == 0 || (sameOwners(ev.OwnerReferences, want.OwnerReferences) && sameLabels(ev.Labels, want.Labels)) {
		return nil
	}
	patch := client.MergeFromWithOptions(ev.DeepCopy(), client.MergeFromWithOptimisticLock{})
	ev.OwnerReferences = want.OwnerReferences
	if ev.Labels == nil {
		ev.Labels = map[string]string{}
	}
	maps.Copy(ev.Labels, want.Labels) // others' labels stay
	if err := r.Client.Patch(ctx, ev, patch); err != nil {
		return fmt.Errorf("updating the owners of Eviction %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	return nil
}

// step computes the Eviction's next status from the objects and writes it
// with the requests' when it changed: cancels, handovers and ends always
// go first. When nothing is to be decided, it reports as the Active
// responder, vacate's own (responder.go) or the evictor (evictor.go): the
// API server takes a responder's report only while it is Active, so a
// report is a write of its own, and the next pass decides again. The
// evictor evicts only once the stored status gives it the turn.
func (r *Reconciler) step(ctx context.Context, pod *corev1.Pod, ev *lifecyclev1alpha1.Eviction, requests []lifecyclev1alpha1.EvictionRequest) (reconcile.Result, error) {
	if !sameResponders(ev, pod) {
		return r.notItsResponders(ctx, ev, pod)
	}
	now := r.Clock.Now()
	next, evict := er.Next(er.Facts{Pod: pod, Requests: requests, Eviction: ev, Now: now})
	if evict {
		evictorStarted(&next)
	}
	if !equalStatus(ev.Status, next) {
		if err := r.writeStatus(ctx, ev, next); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.reportOn(ctx, requests, ev) // the write's watch event brings the next pass
	}
	report, write, poll, err := r.responderReport(ctx, ev, pod, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	held := ""
	if evict {
		held = r.evictorHeld(ctx, ev, pod)
	}
	if !write {
		report, write = r.evictorReport(ev, pod, now, held)
	}
	if write {
		return reconcile.Result{}, r.writeStatus(ctx, ev, report)
	}
	res := reconcile.Result{RequeueAfter: untilDeadline(next, now)}
	switch {
	case evict && held == "":
		if res, err = r.evict(ctx, pod); err != nil {
			return res, err
		}
	case evict, poll:
		res.RequeueAfter = hookPoll
	}
	return res, r.reportOn(ctx, requests, ev)
}

// notItsResponders deletes an Eviction whose responders are not its pod's
// (names and priorities): someone else initialized its status, and turns
// taken on it could skip the pod's own responders. A new one is made for
// the requests.
func (r *Reconciler) notItsResponders(ctx context.Context, ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod) (reconcile.Result, error) {
	logf.FromContext(ctx).Info("deleting an Eviction whose responders are not its pod's", "eviction", client.ObjectKeyFromObject(ev),
		"responders", responderOrder(ev.Status.TargetResponders), "pod's", responderOrder(er.TargetResponders(pod)))
	r.Events.Eventf(ev, pod, corev1.EventTypeWarning, ReasonNotItsResponders, "Coordinate",
		"the Eviction lists the responders %s, its pod declares %s: deleted, and made again", responderOrder(ev.Status.TargetResponders), responderOrder(er.TargetResponders(pod)))
	return r.replace(ctx, ev)
}

// writeStatus stores next as the Eviction's status when it changed,
// recording an event when the Eviction ends.
func (r *Reconciler) writeStatus(ctx context.Context, ev *lifecyclev1alpha1.Eviction, next lifecyclev1alpha1.EvictionStatus) error {
	if equalStatus(ev.Status, next) {
		return nil
	}
	wasFinal := er.Final(ev)
	ev.Status = next
	if err := r.Client.Status().Update(ctx, ev); err != nil {
		return fmt.Errorf("writing the status of Eviction %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	if !wasFinal && er.Final(ev) {
		r.recordEnd(ev)
	}
	return nil
}

// reportOn writes each request's status: the generation seen and, once the
// Eviction is final, its outcome.
// A request changed meanwhile (a conflict) brings a pass of its own.
func (r *Reconciler) reportOn(ctx context.Context, requests []lifecyclev1alpha1.EvictionRequest, ev *lifecyclev1alpha1.Eviction) error {
	for i := range requests {
		req := &requests[i]
		next := er.RequestStatus(req, ev)
		if equalRequestStatus(req.Status, next) {
			continue
		}
		req.Status = next
		if err := r.Client.Status().Update(ctx, req); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("writing the status of EvictionRequest %s/%s: %w", req.Namespace, req.Name, err)
		}
	}
	return nil
}

// evict queues the pod's eviction (once), and tries a refused one again at
// once when its PodDisruptionBudgets allow a disruption now.
func (r *Reconciler) evict(ctx context.Context, pod *corev1.Pod) (reconcile.Result, error) {
	pdbs, err := r.pdbsOf(ctx, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	state := r.Evictions.State(pod.UID)
	switch {
	case state.Evicted:
		return reconcile.Result{}, nil // the pod's end comes as a watch event
	case !state.Pending:
		if why := r.budgetTaken(ctx, pod, pdbs); why != "" && !state.Reserved {
			// A pod a drain reserved had its budget from the drain.
			r.budgetWaits.Store(client.ObjectKeyFromObject(pod), budgetWait{uid: pod.UID, why: why})
			return reconcile.Result{RequeueAfter: refusedRecheck}, nil
		}
		r.budgetWaits.Delete(client.ObjectKeyFromObject(pod))
		req := eviction.PodRequest(pod, nil, 0)
		req.For = Consumer
		for _, p := range pdbs {
			req.PDBs = append(req.PDBs, p.Namespace+"/"+p.Name)
		}
		req.Marks = eviction.MarksOf(pod.Name, req.PDBs, byKey(pdbs))
		if err := r.Evictions.Add(req); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: heartbeatEvery}, nil
	case state.PDBRefused():
		if now := pdbState(pdbs); allowNow(pdbs) && state.Refusal.RetriedAt != now && (state.Reserved || r.budgetTaken(ctx, pod, pdbs) == "") {
			r.Evictions.RetryNow(pod.UID, now)
		}
		return reconcile.Result{RequeueAfter: refusedRecheck}, nil
	}
	return reconcile.Result{RequeueAfter: heartbeatEvery}, nil
}

// budgetTaken says why the pod's eviction must wait although its PDBs
// allow a disruption: the evictions underway (the drains' queued ones, and
// the pods they took out of service or asked for with EvictionRequests)
// take what they allow (eviction.Queue.BudgetBeside), so an eviction now
// would jump ahead of a drain's pod, as a drain never does to another's.
// "" when it may go (or a PDB allows nothing at all: the eviction call
// then says so).
func (r *Reconciler) budgetTaken(ctx context.Context, pod *corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) string {
	if len(pdbs) == 0 || !allowNow(pdbs) {
		return ""
	}
	left := r.Evictions.BudgetBeside(pod.UID, byKey(pdbs), func(uid types.UID, key types.NamespacedName) bool {
		p := &corev1.Pod{}
		err := r.Client.Get(ctx, key, p)
		return err == nil && p.UID == uid && p.DeletionTimestamp.IsZero()
	})
	for _, p := range pdbs {
		if k := p.Namespace + "/" + p.Name; left[k] <= 0 {
			return fmt.Sprintf("waiting: what PodDisruptionBudget %s allows now (%d) is taken by evictions already underway (vacate's drains' pods); the pod goes when one is done",
				k, p.Status.DisruptionsAllowed)
		}
	}
	return ""
}

// pdbsOf are the PodDisruptionBudgets that select the pod.
func (r *Reconciler) pdbsOf(ctx context.Context, pod *corev1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	list := &policyv1.PodDisruptionBudgetList{}
	if err := r.Client.List(ctx, list, client.InNamespace(pod.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the PodDisruptionBudgets of %s: %w", pod.Namespace, err)
	}
	all := make([]*policyv1.PodDisruptionBudget, 0, len(list.Items))
	for i := range list.Items {
		all = append(all, &list.Items[i])
	}
	return drain.GuardsOf(all...).Of(pod), nil
}

// MayEvict is asked by the queue right before each eviction call of the
// coordinator's: the pod's Eviction must still give the evictor its turn
// (an Eviction cancelled meanwhile, or another pod under the name, stops
// it).
func (r *Reconciler) MayEvict(req eviction.Request) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, err := r.read(ctx, req.Pod)
	if err != nil {
		return false, "cannot read the pod's Eviction: " + err.Error()
	}
	ev := t.eviction
	switch {
	case ev == nil:
		return false, "the pod has no Eviction"
	case ev.Spec.Target.Pod == nil || ev.Spec.Target.Pod.UID != req.UID:
		return false, "the pod's Eviction is for another pod"
	case er.Final(ev):
		return false, "the pod's Eviction ended"
	case !anyWants(forUID(t.requests, req.UID)):
		return false, "no EvictionRequest asks for the pod's eviction any more"
	case t.pod != nil && !sameResponders(ev, t.pod):
		return false, "the pod's Eviction lists responders that are not the pod's"
	}
	for _, rt := range ev.Status.TargetResponders {
		if rt.State != lifecyclev1alpha1.ResponderStateActive {
			continue
		}
		if rt.Name != er.Evictor {
			return false, "responder " + rt.Name + " has the turn"
		}
		if t.pod != nil {
			if why := r.providersHold(ctx, t.pod); why != "" {
				return false, why
			}
		}
		return true, ""
	}
	return false, "no responder has the turn"
}

// OnOutcome hears every answer to the coordinator's eviction calls and
// brings a pass for the pod.
func (r *Reconciler) OnOutcome(o eviction.Outcome) {
	countOutcome(o)
	if o.Result == eviction.Evicted { // where `kubectl describe pod` looks
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Pod.Namespace, Name: o.Pod.Name, UID: o.UID}}
		r.Events.Eventf(pod, nil, corev1.EventTypeNormal, v1alpha1.EventEvicted, "Evict",
			"evicted by vacate for the pod's EvictionRequests (Eviction %s/%s)", o.Pod.Namespace, o.Pod.Name)
	}
	ev := event.GenericEvent{Object: &corev1.Pod{}}
	ev.Object.SetNamespace(o.Pod.Namespace)
	ev.Object.SetName(o.Pod.Name)
	select {
	case r.Wake <- ev:
	default: // full: the pass's own requeue comes
	}
}

// findTrue is the Eviction's condition of type t, if True.
func findTrue(ev *lifecyclev1alpha1.Eviction, t lifecyclev1alpha1.EvictionConditionType) *metav1.Condition {
	c := meta.FindStatusCondition(ev.Status.Conditions, string(t))
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil
	}
	return c
}
