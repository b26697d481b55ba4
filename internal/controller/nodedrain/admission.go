package nodedrain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// WaitingForBatch is the reason a drain waits while the drains requested
// with it are gathered and cordoned.
const WaitingForBatch = "WaitingForBatch"

// admissions serializes admission decisions in this process and bridges the
// informer cache's lag: a drain admitted here counts as running before the
// cache shows its Admitted condition, so two passes never both take the last
// slot. Only the leader reconciles, and a drain is admitted in the cluster
// (its status written) before it cordons alone or evicts anything, so a new
// leader sees every admission.
type admissions struct {
	mu       sync.Mutex
	admitted map[types.UID]bool
	// windowTimers wake drains waiting for a maintenance window when it opens.
	windowTimers map[string]clock.Timer
}

func newAdmissions() admissions {
	return admissions{admitted: map[types.UID]bool{}, windowTimers: map[string]clock.Timer{}}
}

// holds reports whether this process admitted the drain.
func (a *admissions) holds(nd *v1alpha1.NodeDrain) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admitted[nd.UID]
}

// settled drops a drain whose admission the cache now shows.
func (a *admissions) settled(nd *v1alpha1.NodeDrain) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.admitted, nd.UID)
}

// forget drops everything held for a drain that was undone.
func (a *admissions) forget(nd *v1alpha1.NodeDrain) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.admitted, nd.UID)
	if t, ok := a.windowTimers[nd.Name]; ok {
		t.Stop()
		delete(a.windowTimers, nd.Name)
	}
}

// wakeAt wakes a drain after d by the reconciler's clock (a maintenance
// window opening), replacing an earlier wake-up for it.
func (a *admissions) wakeAt(name string, d time.Duration, r *Reconciler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.windowTimers[name]; ok {
		t.Stop()
	}
	a.windowTimers[name] = r.Clock.AfterFunc(d, func() {
		r.wake(name)
	})
}

// isAdmitted reports whether a drain holds its admission in the cluster.
func isAdmitted(nd *v1alpha1.NodeDrain) bool {
	return meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
}

// running reports whether a drain takes part in admission: requested, not
// being deleted, not ended.
func running(nd *v1alpha1.NodeDrain) bool {
	return len(nd.Spec.Requesters) > 0 && nd.DeletionTimestamp.IsZero() &&
		nd.Status.Phase != v1alpha1.PhaseDrained && nd.Status.Phase != v1alpha1.PhaseFailed
}

// admit lets the drain start when its policy allows: inside a maintenance
// window, after the batch window (every drain requested with it cordoned),
// and when the scheduler gives it a slot. A queued drain is cordoned (unless
// it waits for a window), so pods evicted from the running drains never land
// on it; it stays Pending with Admitted=False saying why and its place in the
// queue. The admission is written before the drain evicts anything.
func (r *Reconciler) admit(ctx context.Context, s *scope) (reconcile.Result, error) {
	nd := s.drain
	if nd.Status.RequestTime == nil {
		nd.Status.RequestTime = &metav1.Time{Time: s.now}
	}
	if isAdmitted(nd) && nd.Status.StartTime != nil {
		r.queue.settled(nd)
		return reconcile.Result{}, nil
	}
	if r.queue.holds(nd) { // admitted by an earlier pass; the cache has not caught up
		return r.admitted(s, "the drain may proceed")
	}
	if v, open := r.gate(s); !open {
		return r.queueUp(s, v, resync)
	}
	// Every drain that may start soon is cordoned now, so pods evicted by
	// the drains admitted before it never land on it.
	if res, err := r.cordon(ctx, s); err != nil || !res.IsZero() {
		return res, err
	}
	v, wake, err := r.decide(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !v.Admit {
		return r.queueUp(s, v, wake)
	}
	return r.admitted(s, v.Message)
}

// queueUp records why the drain waits, and its place in the queue.
func (r *Reconciler) queueUp(s *scope, v schedule.Verdict, wake time.Duration) (reconcile.Result, error) {
	nd := s.drain
	nd.Status.Phase = v1alpha1.PhasePending
	nd.Status.QueuePosition = int32(v.Position)
	s.setCondition(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, v.Reason, v.Message)
	r.queued.set(nd.Name, v.Reason)
	s.stop = true
	return reconcile.Result{RequeueAfter: min(wake, resync)}, nil
}

// admitted records the admission. Nothing more happens this pass: the
// admission is written first, and its write brings the next pass, which
// evicts.
func (r *Reconciler) admitted(s *scope, msg string) (reconcile.Result, error) {
	nd := s.drain
	nd.Status.QueuePosition = 0
	s.setCondition(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, ReasonAdmitted, msg)
	r.queued.set(nd.Name)
	if nd.Status.StartTime == nil {
		nd.Status.StartTime = &metav1.Time{Time: s.now}
		waited, pol, log := s.now.Sub(nd.Status.RequestTime.Time), s.policy.Describe(), s.log
		s.afterWrite(func() {
			metrics.Admissions.Inc()
			metrics.QueueWait.Observe(waited.Seconds())
			log.Info("starting drain", "node", nd.Spec.NodeName, "policy", pol, "queued", waited.Round(time.Millisecond))
		})
	}
	s.stop = true
	return reconcile.Result{}, nil
}

// gate checks the policy's schedule: no drain starts, or is even cordoned,
// outside its maintenance windows or while the schedule cannot be read.
func (r *Reconciler) gate(s *scope) (schedule.Verdict, bool) {
	adm, v := s.policy.Admission, schedule.Verdict{Node: s.drain.Name}
	switch {
	case adm.ScheduleErr != nil:
		v.Reason = schedule.InvalidSchedule
		v.Message = fmt.Sprintf("%s: %v; no drain is admitted until it is fixed", s.policy.Describe(), adm.ScheduleErr)
	case !adm.Windows.Open(s.now):
		next := adm.Windows.Next(s.now)
		r.queue.wakeAt(s.drain.Name, next.Sub(s.now), r)
		v.Reason = schedule.OutsideWindow
		v.Message = fmt.Sprintf("outside the maintenance windows of %s: %s; the next opens %s (in %s); the node is not cordoned until then",
			s.policy.Describe(), adm.Windows, next.In(adm.Windows.Location()).Format("Mon 2006-01-02 15:04 MST"), next.Sub(s.now).Round(time.Second))
	default:
		return v, true
	}
	return v, false
}

// decide asks the scheduler, under the lock, whether the drain starts now.
// wake is when a waiting drain should look again (its batch window ending).
func (r *Reconciler) decide(ctx context.Context, s *scope) (schedule.Verdict, time.Duration, error) {
	r.queue.mu.Lock()
	defer r.queue.mu.Unlock()
	nd, adm := s.drain, s.policy.Admission
	waiting := func(reason, msg string, wake time.Duration) (schedule.Verdict, time.Duration, error) {
		return schedule.Verdict{Node: nd.Name, Reason: reason, Message: msg}, wake, nil
	}
	if left := nd.Status.RequestTime.Add(adm.BatchWindow).Sub(s.now); left > 0 {
		return waiting(WaitingForBatch, fmt.Sprintf("gathering the drains requested with it for %s (batchWindow), to cordon them all before any eviction", adm.BatchWindow), left)
	}
	members, err := r.members(ctx, s)
	if err != nil {
		return schedule.Verdict{}, 0, err
	}
	var uncordoned []string
	for _, m := range members {
		if !m.admitted && !m.node.Spec.Unschedulable {
			uncordoned = append(uncordoned, m.node.Name)
		}
	}
	if len(uncordoned) > 0 {
		return waiting(WaitingForBatch, fmt.Sprintf("waiting for node(s) %s, requested with it, to be cordoned before any eviction", strings.Join(uncordoned, ", ")), resync)
	}
	limits, err := r.limits(ctx, s)
	if err != nil {
		return schedule.Verdict{}, 0, err
	}
	pdbs, err := r.pdbs(ctx)
	if err != nil {
		return schedule.Verdict{}, 0, err
	}
	drains := make([]schedule.Drain, 0, len(members))
	runningNow := 0
	for _, m := range members {
		d, err := r.toSchedule(ctx, m, s, pdbs, limits)
		if err != nil {
			return schedule.Verdict{}, 0, err
		}
		if m.admitted {
			runningNow++
		}
		drains = append(drains, d)
	}
	for _, v := range schedule.Admit(drains, pdbs, limits) {
		if v.Node != nd.Spec.NodeName {
			continue
		}
		if v.Admit {
			r.queue.admitted[nd.UID] = true
			v.Message = fmt.Sprintf("admitted by %s: %d of at most %d drains running", s.policy.Describe(), runningNow+1, limits.MaxParallel)
		}
		return v, resync, nil
	}
	return schedule.Verdict{}, 0, fmt.Errorf("admission gave no verdict for node %s", nd.Spec.NodeName)
}

// member is a drain that competes for the same policy's slots.
type member struct {
	drain    *v1alpha1.NodeDrain
	node     *corev1.Node
	admitted bool
}

// members are the running drains governed by the same policy as s's, this
// one included. A drain whose node or policy cannot be read is left out: it
// is waiting itself and holds no slot.
func (r *Reconciler) members(ctx context.Context, s *scope) ([]member, error) {
	list := &v1alpha1.NodeDrainList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing NodeDrains: %w", err)
	}
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return nil, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	var out []member
	for i := range list.Items {
		nd := &list.Items[i]
		if nd.UID == s.drain.UID {
			out = append(out, member{drain: s.drain, node: s.node})
			continue
		}
		if !running(nd) {
			continue
		}
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node); err != nil {
			continue
		}
		name := nd.Spec.PolicyName
		if name == "" {
			dp, _, err := policy.Select(node.Labels, policies.Items)
			if err != nil {
				continue
			}
			if dp != nil {
				name = dp.Name
			}
		}
		if name != s.policy.Name {
			continue
		}
		out = append(out, member{drain: nd, node: node, admitted: isAdmitted(nd) || r.queue.admitted[nd.UID]})
	}
	return out, nil
}

// limits resolves the policy's concurrency; a percentage counts the nodes
// the policy governs.
func (r *Reconciler) limits(ctx context.Context, s *scope) (schedule.Limits, error) {
	adm := s.policy.Admission
	governed := 0
	if adm.MaxParallelNodes != nil && adm.MaxParallelNodes.Type == intstr.String {
		nodes := &corev1.NodeList{}
		if err := r.Client.List(ctx, nodes); err != nil {
			return schedule.Limits{}, fmt.Errorf("listing nodes: %w", err)
		}
		policies := &v1alpha1.DrainPolicyList{}
		if err := r.Client.List(ctx, policies); err != nil {
			return schedule.Limits{}, fmt.Errorf("listing DrainPolicies: %w", err)
		}
		for _, n := range nodes.Items {
			dp, _, err := policy.Select(n.Labels, policies.Items)
			if err == nil && ((dp == nil && s.policy.Name == "") || (dp != nil && dp.Name == s.policy.Name)) {
				governed++
			}
		}
	}
	n, err := schedule.MaxParallel(adm.MaxParallelNodes, governed)
	if err != nil {
		return schedule.Limits{}, err
	}
	return schedule.Limits{MaxParallel: n, Topology: adm.Topology}, nil
}

// toSchedule describes a member for the scheduler: its topology, when it was
// requested, and the PDB disruptions its pods still need.
func (r *Reconciler) toSchedule(ctx context.Context, m member, s *scope, pdbs []*policyv1.PodDisruptionBudget, l schedule.Limits) (schedule.Drain, error) {
	d := schedule.Drain{Node: m.node.Name, Admitted: m.admitted, Requested: m.drain.CreationTimestamp.Time, Topology: map[string]string{}, PDBs: map[string]int{}}
	if t := m.drain.Status.RequestTime; t != nil {
		d.Requested = t.Time
	}
	for _, lim := range l.Topology {
		d.Topology[lim.Key] = m.node.Labels[lim.Key]
	}
	pods, err := r.podsOnNode(ctx, m.node.Name)
	if err != nil {
		return d, err
	}
	for _, dec := range drain.New(pods, pdbs, s.policy.Rules, s.now).Decisions {
		if dec.Action != drain.Evict {
			continue
		}
		for _, p := range dec.PDBs {
			d.PDBs[p]++
		}
	}
	return d, nil
}
