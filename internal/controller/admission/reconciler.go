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
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
	"github.com/vacate-dev/vacate/internal/controller/cordon"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/schedule"
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

// maxBatch bounds a batch that keeps growing: a drain waits at most this
// many batch windows after its own request.
const maxBatch = 5

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

// Reconcile computes the queue of one policy and carries its verdicts out.
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

// member is a drain of the queue.
type member struct {
	drain *v1alpha1.NodeDrain
	// node is the drain's node; a stand-in with only its name for an
	// admitted drain whose node is gone (it holds its slot until the pass
	// of HeldKey gives the admission up).
	node     *corev1.Node
	admitted bool
}

// queue is what a pass read of one policy's queue.
type queue struct {
	key    string
	policy policy.Policy
	now    time.Time
	// all are every NodeDrain, for the queue gauge.
	all []v1alpha1.NodeDrain
	// admitted and waiting are the queue's running drains.
	admitted, waiting []*member
	// nodes are the nodes by name as this pass last saw them.
	nodes  map[string]*corev1.Node
	limits schedule.Limits
	pdbs   []*policyv1.PodDisruptionBudget
	// needs are, per member's node, what its pods that must still leave need.
	needs map[string]need
}

// read gathers the queue from reader (the cache, or the API server for the
// drains before an admission) and the cache for nodes, pods and PDBs.
func (r *Reconciler) read(ctx context.Context, reader client.Reader, key string, pol policy.Policy, now time.Time) (*queue, error) {
	list := &v1alpha1.NodeDrainList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing NodeDrains: %w", err)
	}
	policies := &v1alpha1.DrainPolicyList{}
	if err := r.Client.List(ctx, policies); err != nil {
		return nil, fmt.Errorf("listing DrainPolicies: %w", err)
	}
	q := &queue{key: key, policy: pol, now: now, all: list.Items, nodes: map[string]*corev1.Node{}, needs: map[string]need{}}
	for i := range list.Items {
		nd := &list.Items[i]
		if !nd.Running() {
			continue
		}
		m, err := r.member(ctx, nd, key, policies.Items)
		if err != nil || m == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		q.nodes[m.node.Name] = m.node
		if m.admitted {
			q.admitted = append(q.admitted, m)
		} else {
			q.waiting = append(q.waiting, m)
		}
	}
	if len(q.waiting) == 0 {
		return q, nil
	}
	var err error
	if q.limits, err = r.limits(ctx, pol, policies.Items); err != nil {
		return nil, err
	}
	if len(q.admitted) >= q.limits.MaxParallel {
		return q, nil // no slot: every waiting drain waits for one, whatever its PDBs
	}
	if q.pdbs, err = index.PDBs(ctx, r.Client); err != nil {
		return nil, err
	}
	guards := drain.GuardsOf(q.pdbs...)
	for _, m := range append(append([]*member(nil), q.admitted...), q.waiting...) {
		if q.needs[m.node.Name], err = r.needs(ctx, m.node, pol, guards, now); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// member places a running drain: in this queue (its node's policy, or the
// one it names, is key's), or not (nil). A drain whose node is missing,
// replaced or governed by no clear policy belongs to no queue: the pass of
// HeldKey holds it. Once admitted, it counts in every queue it may belong
// to until that pass gives the admission up, to be safe. A replaced node's
// drain comes back as a new one once the NodeDrain controller recorded the
// new node's UID (which waits for that).
func (r *Reconciler) member(ctx context.Context, nd *v1alpha1.NodeDrain, key string, policies []v1alpha1.DrainPolicy) (*member, error) {
	admitted := nd.Admitted()
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node); apierrors.IsNotFound(err) {
		if admitted && (nd.Spec.PolicyName == "" || nd.Spec.PolicyName == key) {
			return &member{drain: nd, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.Spec.NodeName}}, admitted: true}, nil
		}
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err)
	}
	if !admitted && nd.Status.NodeUID != "" && nd.Status.NodeUID != string(node.UID) {
		return nil, nil // replaced: held until the NodeDrain controller starts it over
	}
	name, err := KeyOf(nd, node.Labels, policies)
	switch {
	case err != nil && admitted:
		return &member{drain: nd, node: node, admitted: true}, nil
	case err != nil || name != key:
		return nil, nil
	}
	return &member{drain: nd, node: node, admitted: admitted}, nil
}

// KeyOf is the queue of a drain on a node with these labels: the policy it
// names, or the one that governs the node, or BuiltinKey.
func KeyOf(nd *v1alpha1.NodeDrain, nodeLabels map[string]string, policies []v1alpha1.DrainPolicy) (string, error) {
	if nd.Spec.PolicyName != "" {
		return nd.Spec.PolicyName, nil
	}
	dp, _, err := policy.Select(nodeLabels, policies)
	switch {
	case err != nil:
		return "", err
	case dp == nil:
		return BuiltinKey, nil
	}
	return dp.Name, nil
}

// limits resolves the policy's concurrency; a percentage counts the nodes
// the policy governs.
func (r *Reconciler) limits(ctx context.Context, pol policy.Policy, policies []v1alpha1.DrainPolicy) (schedule.Limits, error) {
	adm := pol.Admission
	governed := 0
	if adm.MaxParallelNodes != nil && adm.MaxParallelNodes.Type == intstr.String {
		nodes := &corev1.NodeList{}
		if err := r.Client.List(ctx, nodes); err != nil {
			return schedule.Limits{}, fmt.Errorf("listing nodes: %w", err)
		}
		for _, n := range nodes.Items {
			dp, _, err := policy.Select(n.Labels, policies)
			if err == nil && ((dp == nil && pol.Name == "") || (dp != nil && dp.Name == pol.Name)) {
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

// need is what a node's pods that must still leave need of the PDBs.
type need struct {
	// pdbs are, per PDB, the pods it guards.
	pdbs map[string]int
	// unguarded are the pods no PDB guards.
	unguarded int
}

// needs are what the node's pods that the planner would evict need: per
// PDB, the pods it guards, and how many no PDB guards.
func (r *Reconciler) needs(ctx context.Context, node *corev1.Node, pol policy.Policy, guards *drain.Guards, now time.Time) (need, error) {
	pods, err := r.Pods.Or(r.Client)(ctx, node.Name)
	if err != nil {
		return need{}, fmt.Errorf("listing pods on node %s: %w", node.Name, err)
	}
	out := need{pdbs: map[string]int{}}
	for _, dec := range drain.New(pods, guards, pol.Rules.ForNode(node), now).Decisions {
		if dec.Action != drain.Evict {
			continue
		}
		if len(dec.PDBs) == 0 {
			out.unguarded++
		}
		for _, p := range dec.PDBs {
			out.pdbs[p]++
		}
	}
	return out, nil
}

// verdict is what a pass decided for one waiting drain.
type verdict struct {
	schedule.Verdict
	// gated: it waits for a maintenance window (or a readable schedule),
	// with its node schedulable meanwhile.
	gated bool
}

// plan is a pass's decisions for the waiting drains of a queue.
type plan struct {
	verdicts map[types.UID]verdict
	// order is the admitted drains in the order they are admitted.
	order []types.UID
	// why adds to a drain's admission message (a window it skipped).
	why map[types.UID]string
	// wake is when the queue needs its next pass without an event.
	wake time.Duration
}

func (p *plan) admits() bool { return len(p.order) > 0 }

// only keeps the verdicts of these drains: a drain the confirming read
// found but the pass did not cordon is decided by the next pass.
func (p *plan) only(ms []*member) *plan {
	keep := map[types.UID]bool{}
	for _, m := range ms {
		keep[m.drain.UID] = true
	}
	for uid := range p.verdicts {
		if !keep[uid] {
			delete(p.verdicts, uid)
		}
	}
	p.order = slices.DeleteFunc(p.order, func(uid types.UID) bool { return !keep[uid] })
	return p
}

// cordonedAs takes the nodes as an earlier read of the pass left them
// (cordoned just now: the cache may not show it yet).
func (q *queue) cordonedAs(earlier *queue) {
	for _, m := range append(append([]*member(nil), q.admitted...), q.waiting...) {
		if n, ok := earlier.nodes[m.node.Name]; ok {
			m.node = n
			q.nodes[n.Name] = n
		}
	}
}

// plan decides, purely from what the pass read: which waiting drains wait
// for a window, which for their batch, and which the scheduler admits.
func (q *queue) plan() *plan {
	p := &plan{verdicts: map[types.UID]verdict{}, why: map[types.UID]string{}, wake: requeue.Resync}
	adm := q.policy.Admission
	var eligible []*member
	for _, m := range q.waiting {
		v, ok := q.gate(m, p)
		if !ok {
			p.verdicts[m.drain.UID] = v
			continue
		}
		eligible = append(eligible, m)
	}
	if closes := adm.Windows.Closes(q.now); !closes.IsZero() && len(eligible) > 0 {
		p.wake = min(p.wake, closes.Sub(q.now)) // queued drains give their nodes back then
	}
	newest := time.Time{}
	for _, m := range eligible {
		if t := requestTime(m.drain, q.now); t.After(newest) {
			newest = t
		}
	}
	var ready []*member
	for _, m := range eligible {
		left := min(newest.Add(adm.BatchWindow).Sub(q.now), requestTime(m.drain, q.now).Add(maxBatch*adm.BatchWindow).Sub(q.now))
		if left > 0 {
			p.verdicts[m.drain.UID] = verdict{Verdict: schedule.Verdict{Node: m.node.Name, Reason: v1alpha1.ReasonWaitingForBatch,
				Message: fmt.Sprintf("gathering the drains requested with it, to cordon them all before any eviction: "+
					"the batch closes %s after the last request (batchWindow), at most %s after its own", adm.BatchWindow, maxBatch*adm.BatchWindow)}}
			p.wake = min(p.wake, left)
			continue
		}
		ready = append(ready, m)
	}
	if len(ready) == 0 {
		return p
	}
	drains := make([]schedule.Drain, 0, len(q.admitted)+len(ready))
	byNode := map[string]*member{}
	for _, m := range q.admitted {
		drains = append(drains, q.toSchedule(m))
	}
	for _, m := range ready {
		drains = append(drains, q.toSchedule(m))
		byNode[m.node.Name] = m
	}
	running := len(q.admitted)
	for _, v := range schedule.Admit(drains, q.pdbs, q.limits) {
		m := byNode[v.Node]
		if m == nil {
			continue
		}
		if v.Admit {
			running++
			v.Message = fmt.Sprintf("admitted by %s: %d of at most %d drains running", q.describe(m, p), running, q.limits.MaxParallel)
			p.order = append(p.order, m.drain.UID)
		}
		p.verdicts[m.drain.UID] = verdict{Verdict: v}
	}
	return p
}

// gate checks the policy's schedule: no drain starts, or is even cordoned,
// outside its maintenance windows or while the schedule cannot be read.
// Node deletion does not wait for a window (a deleted node cannot wait for
// Sunday): a drain whose node is being deleted, or that the delete trigger
// requests, skips the schedule, and so does a drain that ended and runs
// again; its admission message says so.
func (q *queue) gate(m *member, p *plan) (verdict, bool) {
	adm, v := q.policy.Admission, verdict{Verdict: schedule.Verdict{Node: m.node.Name}, gated: true}
	switch {
	case !m.node.DeletionTimestamp.IsZero() || requests.Index(m.drain, v1alpha1.RequesterDelete) >= 0:
		if adm.ScheduleErr != nil || !adm.Windows.Open(q.now) {
			p.why[m.drain.UID] = "its maintenance windows skipped: the node is being deleted"
		}
		return verdict{}, true
	case m.drain.Status.Run != nil && m.drain.Status.Run.Reason != "":
		// A drain that ran and runs again goes on with what it started
		// (its node stays cordoned), as a running drain does outside its
		// windows.
		if adm.ScheduleErr != nil || !adm.Windows.Open(q.now) {
			p.why[m.drain.UID] = "its maintenance windows skipped: it ran before and runs again (" + m.drain.Status.Run.Reason + ")"
		}
		return verdict{}, true
	case adm.ScheduleErr != nil:
		v.Reason = schedule.InvalidSchedule
		v.Message = fmt.Sprintf("%s: %v; no drain is admitted until it is fixed", q.policy.Describe(), adm.ScheduleErr)
	case !adm.Windows.Open(q.now):
		next := adm.Windows.Next(q.now)
		p.wake = min(p.wake, next.Sub(q.now))
		v.Reason = schedule.OutsideWindow
		v.Message = fmt.Sprintf("outside the maintenance windows of %s: %s; the next opens %s (in %s); vacate leaves the node schedulable until then",
			q.policy.Describe(), adm.Windows, next.In(adm.Windows.Location()).Format("Mon 2006-01-02 15:04 MST"), next.Sub(q.now).Round(time.Second))
	default:
		return verdict{}, true
	}
	return v, false
}

// describe names the policy in an admission message, with what it skipped.
func (q *queue) describe(m *member, p *plan) string {
	pol := q.policy
	if why := p.why[m.drain.UID]; why != "" {
		pol.Why = strings.TrimPrefix(pol.Why+"; ", "; ") + why
	}
	return pol.Describe()
}

// toSchedule describes a member for the scheduler.
func (q *queue) toSchedule(m *member) schedule.Drain {
	d := schedule.Drain{Node: m.node.Name, Admitted: m.admitted, Requested: requestTime(m.drain, q.now), Topology: map[string]string{}, PDBs: q.needs[m.node.Name].pdbs, Unguarded: q.needs[m.node.Name].unguarded}
	for _, lim := range q.limits.Topology {
		d.Topology[lim.Key] = m.node.Labels[lim.Key]
	}
	if dl := v1alpha1.EarliestDeadline(m.drain.Spec.Requesters); dl != nil {
		d.Deadline = dl.Time.Time
	}
	return d
}

// requestTime is when the drain was requested: status.requestTime once
// admission recorded it, else now (this pass records it).
func requestTime(nd *v1alpha1.NodeDrain, now time.Time) time.Time {
	if nd.Status.RequestTime != nil {
		return nd.Status.RequestTime.Time
	}
	return now
}

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
func (r *Reconciler) cordonBatch(ctx context.Context, q *queue, p *plan) (reconcile.Result, error) {
	for _, m := range q.waiting {
		if p.verdicts[m.drain.UID].gated {
			continue
		}
		changed, err := cordon.Cordon(ctx, r.Client, m.node, m.drain)
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: requeue.ConflictRetry}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		if !changed {
			continue
		}
		r.Events.Eventf(m.drain, m.node, corev1.EventTypeNormal, v1alpha1.EventCordoned, "Cordon", "cordoned node %s", m.node.Name)
		if res, err := r.stillWanted(ctx, m); err != nil || !res.IsZero() {
			return res, err
		}
	}
	return reconcile.Result{}, nil
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

// write records the verdicts in the drains' status, admissions first and
// in the planner's order, each under an optimistic lock: a drain that
// changed meanwhile is decided again by the next pass.
func (r *Reconciler) write(ctx context.Context, logger klog.Logger, q *queue, p *plan) (reconcile.Result, error) {
	byUID := map[types.UID]*member{}
	for _, m := range q.waiting {
		byUID[m.drain.UID] = m
	}
	order := append([]types.UID(nil), p.order...)
	for _, m := range q.waiting {
		if v, ok := p.verdicts[m.drain.UID]; ok && !v.Admit {
			order = append(order, m.drain.UID)
		}
	}
	res := reconcile.Result{}
	for _, uid := range order {
		m, v := byUID[uid], p.verdicts[uid]
		written, err := r.record(ctx, q, m, v)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !written && v.Admit {
			res.RequeueAfter = requeue.ConflictRetry // decided again with what changed
			continue
		}
		if written && v.Admit {
			waited := q.now.Sub(requestTime(m.drain, q.now))
			metrics.Admissions.Inc()
			metrics.QueueWait.Observe(waited.Seconds())
			logger.Info("starting drain", "node", m.node.Name, "policy", q.describe(m, p), "queued", waited.Round(time.Millisecond))
		}
	}
	return res, nil
}

// record writes one verdict; it reports false when the drain changed
// meanwhile (a conflict) or is gone.
func (r *Reconciler) record(ctx context.Context, q *queue, m *member, v verdict) (bool, error) {
	return r.patch(ctx, m.drain, func(nd *v1alpha1.NodeDrain) {
		st := &nd.Status
		if st.RequestTime == nil {
			st.RequestTime = &metav1.Time{Time: q.now}
		}
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
