package cli

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/hold"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/providers"
	"github.com/vacate-dev/vacate/internal/surge"
)

// This file is plan's decide step: from what the read step gathered
// (plan_read.go) it says what a drain would do with the node and each of its
// pods, with the decisions the controller makes (internal/drain,
// internal/policy, internal/providers, internal/hook, internal/hold,
// internal/surge). It makes no API call: the same objects give the same
// plan. The evacuations a drain waits for are decided in
// plan_evacuations.go; each pod's next step in decidePod.

// decideNode plans the drain of the node read.
func decideNode(r nodeRead, in *planInput, c planChoices, now time.Time) (NodePlan, error) {
	np, pol, mode := planHeader(r, c)
	// The pods as the controller drains them: their own annotations only
	// where the policy honours them.
	pods, ignored, err := pol.PodsAsDrained(r.pods, in.labelsOf)
	if err != nil {
		return NodePlan{}, err
	}
	plan := drain.New(pods, drain.GuardsOf(in.pdbs...), pol.Rules.ForNode(r.node), now)
	originals := map[types.UID]*corev1.Pod{}
	for _, pod := range r.pods {
		originals[pod.UID] = pod
	}
	onNode := map[types.UID]*corev1.Pod{}
	var leaving []*corev1.Pod // the pods the drain moves: the ones an evacuation can protect
	for _, d := range plan.Decisions {
		onNode[d.Pod.UID] = d.Pod
		if d.Action != drain.Skip {
			leaving = append(leaving, d.Pod)
		}
	}
	// The drain as its next pass would run it: the node's Evacuations as
	// that pass writes them, and the pods' hooks, judged by the model the
	// controller holds pods with (internal/hold).
	next := plannedDrain(r.existing, r.node, mode)
	evs, err := askProviders(&np, next, r.node, leaving, in, now)
	if err != nil {
		return NodePlan{}, err
	}
	hookStates, hooks, hookBlocked, err := planHooks(&np, r.existing, pol, mode, plan, originals, in.labelsOf, c.allowLoopback)
	if err != nil {
		return NodePlan{}, err
	}
	h, err := hold.Compute(hold.Input{Drain: next, Node: r.node, OnNode: onNode, Leaving: leaving, Evacuations: evs, Providers: in.providers,
		Selects: func(p *v1alpha1.EvacuationProvider, pod *corev1.Pod) (bool, error) {
			return providers.Selects(p, pod, in.labelsOf)
		},
		Hooks: hookStates, Now: now})
	if err != nil {
		return NodePlan{}, err
	}
	before, after := planHolds(&np, h, r.existing, r.node, leaving, onNode, in)
	for _, d := range plan.Decisions {
		f := podFacts{heldBy: h.Holders(d.Pod.UID), ignored: ignored[d.Pod.UID], hookBlocked: hookBlocked[d.Pod.UID],
			gate: drain.PodFacts{}.WithGate(d, plan.PDBs, false), requested: in.requests && len(d.Pod.Spec.EvictionResponders) > 0}
		if d.Action == drain.Evict && surges(pol) {
			if f.honoured, err = pol.HonoursAnnotations(d.Pod.Namespace, in.labelsOf); err != nil {
				return NodePlan{}, err
			}
			if f.workload, err = r.workloadOf(d.Pod); err != nil {
				return NodePlan{}, err
			}
		}
		np.add(decidePod(pol, d, f))
	}
	np.estimate(plan, pol, before+hooks, after)
	return np, nil
}

// planHeader starts the node's plan with what the drain would be: the
// drain already requested, its mode, its policy with the requesters'
// overrides, and what happens to the node's schedulability. It returns the
// policy and mode the rest is planned under.
func planHeader(r nodeRead, c planChoices) (NodePlan, policy.Policy, v1alpha1.DrainMode) {
	np := NodePlan{Node: r.node.Name, Counts: map[string]int{}, Pods: []PodPlan{}, PDBs: []PDBPlan{}, Hooks: []string{}, HTTPHooks: []HookPlan{},
		Providers: []ProviderPlan{}, Evacuations: []EvacuationPlan{}, Blocked: []string{}, Held: []string{}}
	var requesters []v1alpha1.Requester
	mode := v1alpha1.ModeMaintenance
	if r.existing != nil {
		np.Existing = fmt.Sprintf("already requested by %s: %s", requesterList(r.existing), r.existing.Status.Phase)
		requesters = r.existing.Spec.Requesters
		if r.existing.Spec.Mode != "" {
			mode = r.existing.Spec.Mode
		}
	}
	if c.mode != "" {
		mode = v1alpha1.DrainMode(c.mode)
	}
	np.Mode = string(mode)
	if c.as != nil {
		requesters = withRequester(requesters, *c.as)
	}
	pol, overrides := r.policy.WithOverrides(requesters)
	np.Overrides, np.Policy, np.Cordon = overrides, pol.Describe(), cordonPlan(r.node)
	return np, pol, mode
}

// cordonPlan says what the drain would do with the node's schedulability.
func cordonPlan(node *corev1.Node) string {
	drainName, _, withUID := v1alpha1.CordonedBy(node)
	switch {
	case !node.Spec.Unschedulable:
		return "vacate cordons it (and uncordons it when the drain is cancelled)"
	case drainName != "" || withUID: // any record of vacate's cordon
		return "already cordoned by vacate (drain " + drainName + ")"
	}
	return "already cordoned by someone else; vacate leaves it cordoned after the drain"
}

// withRequester is requesters with r in place of the entry of its name, or
// added.
func withRequester(requesters []v1alpha1.Requester, r v1alpha1.Requester) []v1alpha1.Requester {
	out := make([]v1alpha1.Requester, 0, len(requesters)+1)
	for _, e := range requesters {
		if e.Name != r.Name {
			out = append(out, e)
		}
	}
	return append(out, r)
}

// plannedDrain is the drain a plan previews: the node's NodeDrain if there
// is one, else a new one, requested, in the planned mode.
func plannedDrain(existing *v1alpha1.NodeDrain, node *corev1.Node, mode v1alpha1.DrainMode) *v1alpha1.NodeDrain {
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: "planned"}}
	if existing != nil {
		nd = existing.DeepCopy()
		nd.DeletionTimestamp = nil
	}
	nd.Spec.NodeName, nd.Spec.Mode = node.Name, mode
	if len(nd.Spec.Requesters) == 0 {
		nd.Spec.Requesters = []v1alpha1.Requester{{Name: "plan"}}
	}
	return nd
}

// podFacts is what the plan knows of one pod besides the planner's
// decision (drain.Decision): what the evacuations decided of it, and what
// was read for its surge.
type podFacts struct {
	// heldBy are the evacuations it waits for (hold.Model.Holders).
	heldBy []string
	// ignored are its own annotations the policy does not honour in its
	// namespace.
	ignored []string
	// hookBlocked: its HTTP hook holds it for a fault of the pod (an
	// address vacate never calls, bad annotations), not for an answer.
	hookBlocked bool
	// honoured and workload are known only for a pod the drain evicts
	// under a policy that surges: whether the policy honours the pod's own
	// annotations, and its ReplicaSet and Deployment.
	honoured bool
	workload surge.Workload
	// gate is what the pod and its PDBs say of its readiness gate
	// (drain.PodFacts.WithGate, as the controller asks).
	gate drain.PodFacts
	// requested: the pod declares eviction responders and the controller
	// requests through the EvictionRequest API: the drain asks for it.
	requested bool
}

// decidePod is one pod's next step, as the drain would take it now: the
// planner's decision d (evict, skip, wait, block), who holds it, whether
// it is surged, and whether it blocks the drain now. It is the plan's one
// decision per pod, and pure: everything it looks at is in d and f.
func decidePod(pol policy.Policy, d drain.Decision, f podFacts) PodPlan {
	pp := PodPlan{Pod: d.Key(), Action: string(d.Action), Reason: string(d.Reason), Detail: d.Detail, PDBs: d.PDBs,
		HeldBy: f.heldBy, IgnoredAnnotations: f.ignored}
	if d.Action == drain.Evict {
		pp.Surge = surgePlan(pol, d, f.honoured, f.workload)
	}
	pp.BlockedNow = d.Action == drain.Block || (d.Action == drain.Evict && d.PDBBlocked && (pp.Surge == nil || !pp.Surge.Surged)) ||
		(d.Action == drain.Wait && d.Reason == drain.ReasonWaitCompletion) || f.hookBlocked
	// The next step as the controller takes it (drain.Next, which it asks
	// too). A surged pod's replacement is not up before the drain brings
	// it: the plan previews the pass that would.
	next := f.gate
	next.Held, next.Surge, next.Requested = len(f.heldBy) > 0, pp.Surge != nil && pp.Surge.Surged, f.requested
	pp.Next = string(drain.Next(d, next))
	return pp
}

// surges reports whether the policy surges any pod.
func surges(pol policy.Policy) bool { return pol.Surge != "" && pol.Surge != v1alpha1.SurgeNone }

// surgePlan is whether the drain would surge the pod (it is evicted), as
// the controller decides it (surge.Consider); nil when the policy does not
// surge or the pod leaves without a replacement anyway.
func surgePlan(pol policy.Policy, d drain.Decision, honoured bool, w surge.Workload) *SurgePlan {
	if !surges(pol) {
		return nil
	}
	surged, why := surge.Consider(pol.Surge, honoured, d.Pod, len(d.PDBs), d.PDBBlocked, w)
	needs := d.PDBBlocked
	if w.Deployment != nil {
		needs, _ = surge.Needed(len(d.PDBs), d.PDBBlocked, w.Deployment)
	}
	if !surged && (!needs || why == "") {
		return nil // it leaves without one anyway
	}
	return &SurgePlan{Surged: surged, Why: why}
}

// add records one pod's plan, and counts it among the blocked, the held
// and the unreachable.
func (np *NodePlan) add(pp PodPlan) {
	switch {
	case pp.BlockedNow:
		np.Blocked = append(np.Blocked, pp.Pod)
	case len(pp.HeldBy) > 0:
		np.Held = append(np.Held, pp.Pod)
	}
	if pp.Reason == string(drain.ReasonUnreachableTerminating) {
		np.Unreachable = append(np.Unreachable, pp.Pod)
	}
	np.Counts[pp.Action]++
	np.Pods = append(np.Pods, pp)
}

// estimate forecasts the evictions (drain.NewForecast): the PDBs' rounds
// and the time they take, with the evacuations the drain waits for before
// and after eviction, and what bounds them.
func (np *NodePlan) estimate(plan drain.Plan, pol policy.Policy, before, after int) {
	f := drain.NewForecast(plan, pol.Grace, pol.PerNode)
	for _, pf := range f.PDBs {
		np.PDBs = append(np.PDBs, PDBPlan{Name: pf.Name, Budget: explain.Budget(plan.PDBs[pf.Name]), Allowed: pf.Allowed,
			CurrentHealthy: pf.CurrentHealthy, DesiredHealthy: pf.DesiredHealthy, ExpectedPods: pf.ExpectedPods,
			OnNode: pf.OnNode, BlocksNow: pf.Blocks, Rounds: pf.Rounds})
	}
	onTimeout := "Fail"
	if pol.ForceDelete {
		onTimeout = "ForceDelete"
	}
	np.Estimate = Estimate{Evictions: plan.Count(drain.Evict), Rounds: f.Rounds, LowSeconds: f.Low.Seconds(), HighSeconds: f.High.Seconds(),
		Finishes: !f.Stuck && len(np.Blocked) == 0, EvacuationsBefore: before, EvacuationsAfter: after, HeldPods: len(np.Held),
		EvacuationTimeoutSeconds: pol.EvacuationTimeout.Seconds(), DrainTimeoutSeconds: pol.DrainTimeout.Seconds(), OnTimeout: onTimeout}
}
