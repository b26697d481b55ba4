// Package drain decides what happens to each pod of a draining node. It is
// pure: Plan takes plain data (the node's pods, the PDBs, the pod rules of the
// policy, the time) and returns decisions with reasons; the controller carries
// them out and `vacate plan` shows them.
package drain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// PodAnnotation lets a pod opt out of a drain ("skip") or hold it until the
// pod has completed ("wait-completed"), for example a Job's pod.
const PodAnnotation = "vacate.dev/drain"

// Values of PodAnnotation.
const (
	AnnotationSkip          = "skip"
	AnnotationWaitCompleted = "wait-completed"
)

// Action is what happens to a pod.
type Action string

const (
	// Evict: the pod leaves through the Eviction API.
	Evict Action = "Evict"
	// Skip: the pod stays; it does not hold the drain up.
	Skip Action = "Skip"
	// Block: the pod must leave but policy forbids evicting it; the drain
	// waits until it is gone or the policy changes.
	Block Action = "Block"
	// Wait: the pod is leaving on its own (terminating, or a Job's pod asked
	// to complete first); the drain waits for it.
	Wait Action = "Wait"
)

// Reason is why a pod got its action. Reasons are stable CamelCase words for
// conditions, blockers and metrics.
type Reason string

// Reasons, in the order the rules are applied.
const (
	ReasonMirrorPod   Reason = "MirrorPod"
	ReasonCompleted   Reason = "Completed"
	ReasonTerminating Reason = "Terminating"
	// ReasonUnreachableTerminating: a terminating pod on a node that has
	// not been Ready for timeouts.unreachablePods; its kubelet cannot
	// confirm it stopped, so the drain reports it and no longer waits.
	ReasonUnreachableTerminating Reason = "UnreachableTerminating"
	ReasonSkipAnnotation         Reason = "SkipAnnotation"
	ReasonSkipSelector           Reason = "SkipSelector"
	// ReasonNotSelected: the drain's requesters asked for only the pods
	// of their pod selectors, and this one matches none.
	ReasonNotSelected    Reason = "NotSelected"
	ReasonWaitCompletion Reason = "WaitForCompletion"
	ReasonDaemonSet      Reason = "DaemonSetPod"
	// ReasonDaemonSetReturns: under pods.daemonSets Evict, a DaemonSet pod
	// that tolerates the taint keeping DaemonSet pods off the node is left
	// in place: its DaemonSet would put it back at once.
	ReasonDaemonSetReturns Reason = "DaemonSetPodReturns"
	ReasonUnmanaged        Reason = "Unmanaged"
	// ReasonSurgeReplacement: a replacement a surge drain brought up on
	// this node (label SurgeReplacementLabel), not yet its ReplicaSet's.
	ReasonSurgeReplacement Reason = "SurgeReplacement"
	ReasonLocalStorage     Reason = "LocalStorage"
	ReasonEvictable        Reason = "Evictable"
	// ReasonVacateLast: one of vacate's own pods waits until every other
	// pod that must leave the node has left, so vacate finishes its work
	// there before it moves itself.
	ReasonVacateLast Reason = "VacateComponentLast"
)

// SurgeReplacementLabel marks a surge drain's replacement pod
// (internal/surge.LabelOf).
const SurgeReplacementLabel = "vacate.dev/surge-of"

// ComponentLabel marks vacate's own pods (controller, agent, providers'
// agents): label app.kubernetes.io/part-of=vacate.
const (
	ComponentLabel = "app.kubernetes.io/part-of"
	ComponentValue = "vacate"
)

// Rules are the pod rules of a DrainPolicy, resolved and defaulted.
type Rules struct {
	// EvictDaemonSets evicts DaemonSet pods instead of ignoring them.
	EvictDaemonSets bool
	// DeleteUnmanaged evicts pods without a controller instead of blocking.
	DeleteUnmanaged bool
	// EvictLocalStorage evicts pods with emptyDir volumes instead of blocking.
	EvictLocalStorage bool
	// SkipSelector leaves matching pods in place. Nil matches nothing.
	SkipSelector labels.Selector
	// OnlySelector, when set, leaves in place the pods it does not match:
	// requesters' pod selectors (kubectl drain --pod-selector). Nil: every
	// pod may leave.
	OnlySelector labels.Selector
	// UnreachablePods is timeouts.unreachablePods: how long a terminating
	// pod on a node that is not Ready is still waited on. It counts from the
	// later of the pod's deletionTimestamp and NodeNotReadySince. The API
	// server sets deletionTimestamp to the deletion request plus the pod's
	// grace period, so the grace period is already included; a node that
	// was unreachable only briefly never lets a pod go. It applies only
	// with NodeNotReady; 0 stops waiting as soon as both have passed.
	UnreachablePods time.Duration
	// NodeNotReady says the node's kubelet cannot confirm that pods
	// stopped: its Ready condition is not True, or it has the taint
	// node.kubernetes.io/unreachable. Set per node with ForNode.
	NodeNotReady bool
	// NodeNotReadySince is when the node stopped being Ready; zero when
	// unknown (then only the deletionTimestamp counts).
	NodeNotReadySince time.Time
}

// ForNode returns the rules for a drain of node n: r with the node's
// readiness (NodeNotReady, NodeNotReadySince) read from its Ready condition
// and unreachable taint. A nil node counts as Ready.
func (r Rules) ForNode(n *corev1.Node) Rules {
	r.NodeNotReady, r.NodeNotReadySince = false, time.Time{}
	if n == nil {
		return r
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		ready = c.Status == corev1.ConditionTrue
		if !ready {
			r.NodeNotReadySince = c.LastTransitionTime.Time
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key != corev1.TaintNodeUnreachable {
			continue
		}
		if ready && t.TimeAdded != nil {
			r.NodeNotReadySince = t.TimeAdded.Time
		}
		ready = false
	}
	r.NodeNotReady = !ready
	return r
}

// Decision is what happens to one pod, and why.
type Decision struct {
	Pod    *corev1.Pod
	Action Action
	Reason Reason
	// Detail says more for people, such as the PDBs that guard the pod.
	Detail string
	// PDBs are the namespace/name of the PDBs selecting the pod, sorted.
	PDBs []string
	// PDBBlocked is set when an eviction now would be refused: a PDB
	// selecting the pod allows no disruption.
	PDBBlocked bool
	// BlockingPDBs are the PDBs among PDBs that allow no disruption now.
	BlockingPDBs []string
}

// Key is the pod's namespace/name.
func (d Decision) Key() string { return d.Pod.Namespace + "/" + d.Pod.Name }

// Plan is the decisions for every pod on a node, sorted by namespace/name.
type Plan struct {
	Decisions []Decision
	// Recheck is the earliest time a decision changes with time alone (a
	// terminating pod on a node that is not Ready stops being waited on);
	// zero when none does.
	Recheck time.Time
	// PDBs are the PodDisruptionBudgets that guard the plan's evictions,
	// by namespace/name, as the plan saw them: budgets computed from them
	// agree with the decisions.
	PDBs map[string]*policyv1.PodDisruptionBudget
}

// Evicting are the UIDs of the pods the plan evicts.
func (p Plan) Evicting() map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, d := range p.Decisions {
		if d.Action == Evict {
			out[d.Pod.UID] = true
		}
	}
	return out
}

// filter decides a pod's fate or passes (returns false) to the next one.
type filter func(p *corev1.Pod, r Rules, now time.Time) (Decision, bool)

// filters are applied in order; the first that decides wins.
var filters = []filter{
	mirrorPods,
	completedPods,
	unreachablePods,
	terminatingPods,
	annotatedPods,
	skipSelected,
	daemonSetPods,
	unmanagedPods,
	localStoragePods,
}

// New plans the drain of a node with these pods (all bound to it), given the
// PDBs of the cluster (as Guards; nil: none) and the policy's rules.
func New(pods []*corev1.Pod, g *Guards, r Rules, now time.Time) Plan {
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Namespace != sorted[j].Namespace {
			return sorted[i].Namespace < sorted[j].Namespace
		}
		return sorted[i].Name < sorted[j].Name
	})
	plan := Plan{Decisions: make([]Decision, 0, len(sorted))}
	for _, p := range sorted {
		d := decide(p, r, now)
		if d.Action == Evict {
			plan.guard(&d, g.Of(p))
			if d.PDBBlocked {
				d.Detail = "PodDisruptionBudget " + strings.Join(d.BlockingPDBs, ", ") + " allows no disruption now"
			}
		}
		plan.Decisions = append(plan.Decisions, d)
		if giveUp, ok := r.giveUpAt(p); ok && d.Reason == ReasonTerminating &&
			(plan.Recheck.IsZero() || giveUp.Before(plan.Recheck)) {
			plan.Recheck = giveUp
		}
	}
	plan.vacateLast()
	return plan
}

// guard records the PDBs that select the decision's pod, and which of them
// allow no disruption now.
// A PDB is seen at one version for the whole plan: the first (Guards may
// change between two pods).
func (p *Plan) guard(d *Decision, pdbs []*policyv1.PodDisruptionBudget) {
	for _, pdb := range pdbs {
		key := pdb.Namespace + "/" + pdb.Name
		if p.PDBs == nil {
			p.PDBs = map[string]*policyv1.PodDisruptionBudget{}
		}
		if seen, ok := p.PDBs[key]; ok {
			pdb = seen
		}
		p.PDBs[key] = pdb
		d.PDBs = append(d.PDBs, key)
		if pdb.Status.DisruptionsAllowed <= 0 {
			d.PDBBlocked = true
			d.BlockingPDBs = append(d.BlockingPDBs, key)
		}
	}
}

// vacateLast holds vacate's own pods back while any other pod must still
// leave: their evictions wait for the rest of the drain.
func (p *Plan) vacateLast() {
	others := false
	for _, d := range p.Decisions {
		if d.Action != Skip && d.Pod.Labels[ComponentLabel] != ComponentValue {
			others = true
			break
		}
	}
	if !others {
		return
	}
	for i, d := range p.Decisions {
		if d.Action == Evict && d.Pod.Labels[ComponentLabel] == ComponentValue {
			p.Decisions[i].Action, p.Decisions[i].Reason = Wait, ReasonVacateLast
			p.Decisions[i].Detail = "vacate's own pod leaves after the node's other pods"
			p.Decisions[i].PDBBlocked, p.Decisions[i].BlockingPDBs = false, nil
		}
	}
}

func decide(p *corev1.Pod, r Rules, now time.Time) Decision {
	for _, f := range filters {
		if d, ok := f(p, r, now); ok {
			d.Pod = p
			return d
		}
	}
	return Decision{Pod: p, Action: Evict, Reason: ReasonEvictable}
}

func mirrorPods(p *corev1.Pod, _ Rules, _ time.Time) (Decision, bool) {
	if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return Decision{Action: Skip, Reason: ReasonMirrorPod, Detail: "static pod run by the kubelet; it cannot be evicted"}, true
	}
	return Decision{}, false
}

func completedPods(p *corev1.Pod, _ Rules, _ time.Time) (Decision, bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return Decision{Action: Skip, Reason: ReasonCompleted, Detail: "pod has " + strings.ToLower(string(p.Status.Phase)) + "; it holds nothing"}, true
	}
	return Decision{}, false
}

// unreachablePods stops waiting for a terminating pod whose node has not
// been Ready for timeouts.unreachablePods: no kubelet will confirm that it
// stopped, so it is reported instead (like Cluster API's
// skip-wait-for-delete).
func unreachablePods(p *corev1.Pod, r Rules, now time.Time) (Decision, bool) {
	giveUp, ok := r.giveUpAt(p)
	if !ok || now.Before(giveUp) {
		return Decision{}, false
	}
	node := "on a node that is not Ready"
	if !r.NodeNotReadySince.IsZero() {
		node = "on a node not Ready since " + stamp(r.NodeNotReadySince)
	}
	return Decision{Action: Skip, Reason: ReasonUnreachableTerminating, Detail: fmt.Sprintf(
		"grace period ended %s %s; its kubelet cannot confirm the pod stopped; not waited on after timeouts.unreachablePods (%s)",
		stamp(p.DeletionTimestamp.Time), node, r.UnreachablePods)}, true
}

func terminatingPods(p *corev1.Pod, r Rules, now time.Time) (Decision, bool) {
	if p.DeletionTimestamp == nil {
		return Decision{}, false
	}
	detail := "already terminating"
	if since := now.Sub(p.DeletionTimestamp.Time); since > 0 {
		detail = fmt.Sprintf("terminating for %s", since.Round(time.Second))
	}
	if giveUp, ok := r.giveUpAt(p); ok {
		detail += fmt.Sprintf("; the node is not Ready: waited on until %s (timeouts.unreachablePods %s)", stamp(giveUp), r.UnreachablePods)
	}
	return Decision{Action: Wait, Reason: ReasonTerminating, Detail: detail}, true
}

// giveUpAt is when a terminating pod on a node that is not Ready stops
// being waited on: UnreachablePods after the later of its deletionTimestamp
// (the end of its grace period) and the node's NodeNotReadySince. ok is
// false when the pod is waited on until it is gone.
func (r Rules) giveUpAt(p *corev1.Pod) (at time.Time, ok bool) {
	if !r.NodeNotReady || p.DeletionTimestamp == nil {
		return time.Time{}, false
	}
	from := p.DeletionTimestamp.Time
	if r.NodeNotReadySince.After(from) {
		from = r.NodeNotReadySince
	}
	return from.Add(r.UnreachablePods), true
}

// stamp formats a time for details: RFC 3339 in UTC, so it reads the same
// on every pass.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func annotatedPods(p *corev1.Pod, _ Rules, _ time.Time) (Decision, bool) {
	switch p.Annotations[PodAnnotation] {
	case AnnotationSkip:
		return Decision{Action: Skip, Reason: ReasonSkipAnnotation, Detail: PodAnnotation + "=" + AnnotationSkip}, true
	case AnnotationWaitCompleted:
		return Decision{Action: Wait, Reason: ReasonWaitCompletion, Detail: PodAnnotation + "=" + AnnotationWaitCompleted + ": waiting for the pod to complete"}, true
	}
	return Decision{}, false
}

func skipSelected(p *corev1.Pod, r Rules, _ time.Time) (Decision, bool) {
	if r.SkipSelector != nil && !r.SkipSelector.Empty() && r.SkipSelector.Matches(labels.Set(p.Labels)) {
		return Decision{Action: Skip, Reason: ReasonSkipSelector, Detail: "matches the policy's skipSelector " + r.SkipSelector.String()}, true
	}
	if r.OnlySelector != nil && !r.OnlySelector.Matches(labels.Set(p.Labels)) {
		return Decision{Action: Skip, Reason: ReasonNotSelected, Detail: "matches no requester's pod selector (" + r.OnlySelector.String() + ")"}, true
	}
	return Decision{}, false
}

func daemonSetPods(p *corev1.Pod, r Rules, _ time.Time) (Decision, bool) {
	ref := controllerOf(p)
	if ref == nil || ref.Kind != "DaemonSet" {
		return Decision{}, false
	}
	if r.EvictDaemonSets && toleratesKeepOff(p) {
		return Decision{Action: Skip, Reason: ReasonDaemonSetReturns, Detail: "DaemonSet " + ref.Name + " would put it back at once: it tolerates the taint " +
			DaemonSetsOffTaint + " that keeps DaemonSet pods off the node while it drains, so it is left in place"}, true
	}
	if r.EvictDaemonSets {
		return Decision{Action: Evict, Reason: ReasonDaemonSet, Detail: "DaemonSet " + ref.Name + " (policy evicts DaemonSet pods)"}, true
	}
	return Decision{Action: Skip, Reason: ReasonDaemonSet, Detail: "DaemonSet " + ref.Name + " would recreate it; policy ignores DaemonSet pods"}, true
}

// DaemonSetsOffTaint is the taint (effect NoSchedule) vacate puts on a
// node whose drain evicts DaemonSet pods (v1alpha1.TaintDaemonSetsOff):
// their DaemonSet creates no new pod on a node with a NoSchedule taint they
// do not tolerate.
const DaemonSetsOffTaint = v1alpha1.TaintDaemonSetsOff

// toleratesKeepOff reports whether the pod tolerates the taint that keeps
// DaemonSet pods off a draining node, whatever its value (the drain's UID):
// a toleration of effect NoSchedule (or any) with operator Exists, for that
// key or every key (as many node agents' DaemonSets have).
func toleratesKeepOff(p *corev1.Pod) bool {
	for _, t := range p.Spec.Tolerations {
		if (t.Effect == "" || t.Effect == corev1.TaintEffectNoSchedule) && (t.Key == "" || t.Key == DaemonSetsOffTaint) &&
			t.Operator == corev1.TolerationOpExists {
			return true
		}
	}
	return false
}

// controllerOf is the pod's controller reference, or nil; unlike
// metav1.GetControllerOf it does not copy it (a plan asks for every pod of
// the node, every pass).
func controllerOf(p *corev1.Pod) *metav1.OwnerReference {
	for i := range p.OwnerReferences {
		if ref := &p.OwnerReferences[i]; ref.Controller != nil && *ref.Controller {
			return ref
		}
	}
	return nil
}

// ownedByADrain reports whether the pod names a NodeDrain as an owner, as
// a surge replacement does until its ReplicaSet adopts it (the admission
// policy vacate-surge-replacements lets only vacate-controller write one).
func ownedByADrain(p *corev1.Pod) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "NodeDrain" && strings.HasPrefix(ref.APIVersion, "vacate.dev/") {
			return true
		}
	}
	return false
}

// adoptionWait is how long a replacement handed over to its ReplicaSet
// (the drain's owner reference dropped, the template's hash label set) is
// waited on as a replacement before its ReplicaSet adopts it: adoption
// takes moments; a pod that only looks handed over is planned as the bare
// pod it is after that.
const adoptionWait = 2 * time.Minute

// surgeReplacement reports whether a pod without a controller is a surge
// replacement in flight: it carries the surge label and the drain's owner
// reference, or, handed over, the template's hash, for adoptionWait.
func surgeReplacement(p *corev1.Pod, now time.Time) bool {
	if p.Labels[SurgeReplacementLabel] == "" {
		return false
	}
	if ownedByADrain(p) {
		return true
	}
	_, handedOver := p.Labels["pod-template-hash"]
	return handedOver && now.Sub(p.CreationTimestamp.Time) < adoptionWait
}

func unmanagedPods(p *corev1.Pod, r Rules, now time.Time) (Decision, bool) {
	if controllerOf(p) != nil {
		return Decision{}, false
	}
	if surgeReplacement(p, now) {
		// Not a pod of no controller for long: its ReplicaSet adopts it
		// (then it is drained as that ReplicaSet's), or its drain removes it.
		// The label alone is anyone's to write: a pod that only carries it
		// is planned as any bare pod, so a decoy cannot stall the drain.
		return Decision{Action: Wait, Reason: ReasonSurgeReplacement,
			Detail: "a replacement another drain brought up (surge): its ReplicaSet adopts it, or that drain removes it"}, true
	}
	if r.DeleteUnmanaged {
		return Decision{Action: Evict, Reason: ReasonUnmanaged, Detail: "no controller will recreate it (policy pods.unmanaged: Delete)"}, true
	}
	return Decision{Action: Block, Reason: ReasonUnmanaged,
		Detail: "no controller would recreate it; move it, set the policy's pods.unmanaged to Delete, or drain with --force (the verb delete-unmanaged on the policy)"}, true
}

func localStoragePods(p *corev1.Pod, r Rules, _ time.Time) (Decision, bool) {
	var vols []string
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			vols = append(vols, v.Name)
		}
	}
	if len(vols) == 0 {
		return Decision{}, false
	}
	if r.EvictLocalStorage {
		return Decision{Action: Evict, Reason: ReasonLocalStorage, Detail: "emptyDir " + strings.Join(vols, ", ") + " will be lost (policy pods.localStorage: Evict)"}, true
	}
	return Decision{Action: Block, Reason: ReasonLocalStorage,
		Detail: "emptyDir " + strings.Join(vols, ", ") + " would be lost; set the policy's pods.localStorage to Evict, or drain with --delete-emptydir-data (the verb delete-emptydir-data on the policy)"}, true
}

// Count returns how many decisions have the action.
func (p Plan) Count(a Action) int {
	n := 0
	for _, d := range p.Decisions {
		if d.Action == a {
			n++
		}
	}
	return n
}

// Remaining is how many pods must still leave: evict, block and wait.
func (p Plan) Remaining() int { return len(p.Decisions) - p.Count(Skip) }

// Completed reports whether no pod is left that must leave the node.
func (p Plan) Completed() bool { return p.Remaining() == 0 }

// Blocked returns the decisions that hold the drain up and will not resolve
// by evicting: Block decisions and evictions a PDB refuses now.
func (p Plan) Blocked() []Decision {
	var out []Decision
	for _, d := range p.Decisions {
		if d.Action == Block || (d.Action == Evict && d.PDBBlocked) {
			out = append(out, d)
		}
	}
	return out
}

// maxMessagePods bounds how many pods a condition message names.
const maxMessagePods = 5

// ConditionMessage summarises the plan in a message that changes only when
// the state does: counts per action, then the first blocked pods by reason,
// the pods no longer waited on because their node is unreachable, and the
// pods left in place by reason.
func (p Plan) ConditionMessage() string {
	if p.Completed() {
		return "no pods left to move" + p.unreachableSuffix() + p.skippedSuffix()
	}
	parts := []string{}
	for _, a := range []Action{Evict, Wait, Block} {
		if n := p.Count(a); n > 0 {
			parts = append(parts, fmt.Sprintf("%d to %s", n, strings.ToLower(string(a))))
		}
	}
	msg := strings.Join(parts, ", ")
	if blocked := p.Blocked(); len(blocked) > 0 {
		msg += "; blocked: " + podList(blocked)
	}
	return msg + p.unreachableSuffix() + p.skippedSuffix()
}

// Unreachable returns the decisions for pods no longer waited on because
// they are terminating on a node that has not been Ready for
// timeouts.unreachablePods.
func (p Plan) Unreachable() []Decision {
	var out []Decision
	for _, d := range p.Decisions {
		if d.Reason == ReasonUnreachableTerminating {
			out = append(out, d)
		}
	}
	return out
}

// unreachableSuffix names the pods no longer waited on: "; not waited on:
// ns/pod (UnreachableTerminating)".
func (p Plan) unreachableSuffix() string {
	if u := p.Unreachable(); len(u) > 0 {
		return "; not waited on: " + podList(u)
	}
	return ""
}

// podList names at most maxMessagePods pods with their reason, and counts
// the rest.
func podList(ds []Decision) string {
	names := make([]string, 0, maxMessagePods)
	for i, d := range ds {
		if i == maxMessagePods {
			names = append(names, fmt.Sprintf("and %d more", len(ds)-maxMessagePods))
			break
		}
		reason := string(d.Reason)
		if d.PDBBlocked {
			reason = "PodDisruptionBudget"
		}
		names = append(names, d.Key()+" ("+reason+")")
	}
	return strings.Join(names, ", ")
}

// skippedSuffix counts the pods left in place, by reason, so the status
// accounts for every pod on the node: "; left in place: 1 Completed, 2 DaemonSetPod".
// Pods on an unreachable node are named by unreachableSuffix instead.
func (p Plan) skippedSuffix() string {
	counts := map[Reason]int{}
	for _, d := range p.Decisions {
		if d.Action == Skip && d.Reason != ReasonUnreachableTerminating { // named by unreachableSuffix
			counts[d.Reason]++
		}
	}
	if len(counts) == 0 {
		return ""
	}
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, string(r))
	}
	sort.Strings(reasons)
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", counts[Reason(r)], r))
	}
	return "; left in place: " + strings.Join(parts, ", ")
}
