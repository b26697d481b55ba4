package nodedrain

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// admissions serializes admission decisions in this process and bridges the
// informer cache's lag: a drain admitted here counts as running before the
// cache shows its Admitted condition, so two passes never both take the last
// slot. Only the leader reconciles, and a drain is admitted in the cluster
// (its status written) before it cordons alone or evicts anything, so a new
// leader sees every admission.
type admissions struct {
	mu sync.Mutex
	// admitted are the drains this process admitted, with the admission's
	// message, until the cache shows it.
	admitted map[types.UID]string
	// windowTimers wake drains waiting for a maintenance window when it opens.
	windowTimers map[string]clock.Timer
	// verdicts are the scheduler's last answers for a policy's queue. Every
	// queued drain is woken by the same events, so the first pass computes
	// and the others reuse it; any event that may change the answers, and
	// any admission, clears it.
	verdicts verdictCache
}

type verdictCache struct {
	policy string
	at     time.Time
	byNode map[string]schedule.Verdict
}

// verdictTTL bounds how long a queue's verdicts are reused without an event.
const verdictTTL = time.Second

func newAdmissions() admissions {
	return admissions{admitted: map[types.UID]string{}, windowTimers: map[string]clock.Timer{}}
}

// invalidate drops the cached verdicts: something that may change them happened.
func (a *admissions) invalidate() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.verdicts = verdictCache{}
}

// holds reports whether this process admitted the drain, and with what message.
func (a *admissions) holds(nd *v1alpha1.NodeDrain) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	msg, ok := a.admitted[nd.UID]
	return msg, ok
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
	if msg, ok := r.queue.holds(nd); ok { // admitted by an earlier pass; the cache has not caught up
		return r.admitted(s, msg)
	}
	if v, open := r.gate(s); !open {
		// Not cordoned while it waits for a window: that may be days.
		if err := r.uncordon(ctx, s, s.node); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionCordoned)
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
		// Queued inside a window: look again when it closes, to give the
		// node back while the drain waits for the next one.
		if closes := s.policy.Admission.Windows.Closes(s.now); !closes.IsZero() {
			r.queue.wakeAt(nd.Name, closes.Sub(s.now), r)
		}
		return r.queueUp(s, v, wake)
	}
	return r.admitted(s, v.Message)
}

// hold stops a drain that may not go on, or not start: its node or its
// policy is missing or unclear. It gives up any admission (it holds no slot
// and evicts nothing; it is admitted again, like a new drain, once the cause
// clears) and waits with the reason. The node stays as it is.
func (r *Reconciler) hold(s *scope, reason, msg string) {
	nd := s.drain
	nd.Status.Phase = v1alpha1.PhasePending
	nd.Status.StartTime, nd.Status.QueuePosition = nil, 0
	nd.Status.Blockers, nd.Status.Blocked, nd.Status.BlockersOmitted = nil, 0, 0
	meta.RemoveStatusCondition(&nd.Status.Conditions, v1alpha1.ConditionBlocked)
	s.setCondition(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, reason, msg)
	r.forgetNode(nd.Spec.NodeName)
	r.Hooks.ForgetNode(nd.Spec.NodeName)
	r.queue.forget(nd)
	r.queue.invalidate()
	r.blocked.set(nd.Name)
	r.queued.set(nd.Name, reason)
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
	s.setCondition(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, msg)
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
// Node deletion does not wait for a window (a deleted node cannot wait for
// Sunday): a drain whose node is being deleted, or that the delete trigger
// requests, skips the schedule, and the policy's description in this
// pass's Admitted message says so.
func (r *Reconciler) gate(s *scope) (schedule.Verdict, bool) {
	adm, v := s.policy.Admission, schedule.Verdict{Node: s.drain.Name}
	switch {
	case !s.node.DeletionTimestamp.IsZero() || requests.Index(s.drain, v1alpha1.RequesterDelete) >= 0:
		if adm.ScheduleErr != nil || !adm.Windows.Open(s.now) {
			s.policy.Why = strings.TrimPrefix(s.policy.Why+"; ", "; ") + "its maintenance windows skipped: the node is being deleted"
		}
		return v, true
	case adm.ScheduleErr != nil:
		v.Reason = schedule.InvalidSchedule
		v.Message = fmt.Sprintf("%s: %v; no drain is admitted until it is fixed", s.policy.Describe(), adm.ScheduleErr)
	case !adm.Windows.Open(s.now):
		next := adm.Windows.Next(s.now)
		r.queue.wakeAt(s.drain.Name, next.Sub(s.now), r)
		v.Reason = schedule.OutsideWindow
		v.Message = fmt.Sprintf("outside the maintenance windows of %s: %s; the next opens %s (in %s); vacate leaves the node schedulable until then",
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
	members, err := r.members(ctx, s)
	if err != nil {
		return schedule.Verdict{}, 0, err
	}
	var uncordoned []string
	newest := nd.Status.RequestTime.Time
	for _, m := range members {
		if m.admitted {
			continue
		}
		if !m.node.Spec.Unschedulable {
			uncordoned = append(uncordoned, m.node.Name)
		}
		if t := m.drain.Status.RequestTime; t != nil && t.After(newest) {
			newest = t.Time
		}
	}
	if left := batchLeft(nd.Status.RequestTime.Time, newest, s.now, adm.BatchWindow); left > 0 {
		return waiting(v1alpha1.ReasonWaitingForBatch, fmt.Sprintf("gathering the drains requested with it, to cordon them all before any eviction: "+
			"the batch closes %s after the last request (batchWindow), at most %s after its own", adm.BatchWindow, maxBatch*adm.BatchWindow), left)
	}
	if len(uncordoned) > 0 {
		// Their cordon is under way; the node's update may reach this
		// cache after the event that woke us.
		return waiting(v1alpha1.ReasonWaitingForBatch, fmt.Sprintf("waiting for %s, requested with it, to be cordoned before any eviction",
			nodeList(uncordoned)), time.Second)
	}
	c := &r.queue.verdicts
	if v, ok := c.byNode[nd.Spec.NodeName]; ok && c.policy == s.policy.Name && s.now.Sub(c.at) < verdictTTL && !v.Admit {
		return v, resync, nil
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
	*c = verdictCache{policy: s.policy.Name, at: s.now, byNode: map[string]schedule.Verdict{}}
	for _, v := range schedule.Admit(drains, pdbs, limits) {
		c.byNode[v.Node] = v
	}
	v, ok := c.byNode[nd.Spec.NodeName]
	if !ok {
		return schedule.Verdict{}, 0, fmt.Errorf("admission gave no verdict for node %s", nd.Spec.NodeName)
	}
	if v.Admit {
		*c = verdictCache{} // the others' answers change with this admission
		v.Message = fmt.Sprintf("admitted by %s: %d of at most %d drains running", s.policy.Describe(), runningNow+1, limits.MaxParallel)
		r.queue.admitted[nd.UID] = v.Message
	}
	return v, resync, nil
}

// maxBatch bounds a batch that keeps growing: a drain waits at most this
// many batch windows after its own request.
const maxBatch = 5

// batchLeft is how long a drain requested at own waits for its batch to
// close: until window after the newest request of its policy's queue, and
// at most maxBatch windows after its own.
func batchLeft(own, newest, now time.Time, window time.Duration) time.Duration {
	return min(newest.Add(window).Sub(now), own.Add(maxBatch*window).Sub(now))
}

// nodeList names a few nodes, sorted: "node(s) a, b, c and 7 more".
func nodeList(names []string) string {
	const show = 5
	sort.Strings(names)
	if len(names) <= show {
		return "node(s) " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("node(s) %s and %d more", strings.Join(names[:show], ", "), len(names)-show)
}

// member is a drain that competes for the same policy's slots.
type member struct {
	drain    *v1alpha1.NodeDrain
	node     *corev1.Node
	admitted bool
}

// members are the running drains governed by the same policy as s's, this
// one included. A queued drain whose node or policy cannot be read is left
// out (it waits itself); an admitted one is counted until its own pass
// gives its admission up.
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
		_, held := r.queue.admitted[nd.UID]
		admitted := isAdmitted(nd) || held
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node); err != nil {
			if admitted { // it holds its slot until its own pass gives it up
				out = append(out, member{drain: nd, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.Spec.NodeName}}, admitted: true})
			}
			continue
		}
		name := nd.Spec.PolicyName
		if name == "" {
			dp, _, err := policy.Select(node.Labels, policies.Items)
			switch {
			case err != nil && admitted: // unclear now: counted, to be safe
				name = s.policy.Name
			case err != nil:
				continue
			case dp != nil:
				name = dp.Name
			}
		}
		if name != s.policy.Name {
			continue
		}
		out = append(out, member{drain: nd, node: node, admitted: admitted})
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
	for _, dec := range drain.New(pods, pdbs, s.policy.Rules.ForNode(m.node), s.now).Decisions {
		if dec.Action != drain.Evict {
			continue
		}
		for _, p := range dec.PDBs {
			d.PDBs[p]++
		}
	}
	return d, nil
}
