package cli

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/policy"
)

// This file is uninstall's planner: from what uninstall read of the
// cluster (clusterView) it says, with no API call, which steps run in which
// order, what each will cancel, stop or remove, and why. --dry-run prints
// the plan; the executor (uninstall_steps.go, uninstall_force.go) runs its steps.
// The executor reads again what it acts on after each wait (the controller
// restores and removes things meanwhile) and judges it by the same rules
// (notVacatesCordon, cancelConfirmed, policy.Triggers.Wanted).

// stepKind names a step of the uninstall, in the order they run.
type stepKind int

const (
	// stepCancelDrains deletes every NodeDrain and waits until the
	// controller has restored them.
	stepCancelDrains stepKind = iota
	// stepStopController deletes the controller's Deployment and PDB and
	// waits for its pods and the leader Leases.
	stepStopController
	// stepCheckNoDrains refuses to go on if a drain was requested while the
	// controller stopped (without --force).
	stepCheckNoDrains
	// stepReleaseProviders removes vacate.dev/evacuations from the
	// EvacuationProviders once no drain is left (without --force; --force
	// does it in stepUndoLeft).
	stepReleaseProviders
	// stepUndoLeft does the safe part of the controller's undo itself
	// (--force).
	stepUndoLeft
	// stepReleaseNodes removes vacate.dev/drain from the nodes.
	stepReleaseNodes
	// stepReleaseEvictions removes vacate.dev/hook from the Evictions.
	stepReleaseEvictions
	// stepDeletePolicies deletes the DrainPolicies.
	stepDeletePolicies
	// stepDeleteRest deletes the namespace, service account, RBAC objects
	// and admission policies.
	stepDeleteRest
	// stepDeleteCRDs deletes vacate's CRDs.
	stepDeleteCRDs
	// stepNoteBindings names the bindings of people to vacate's roles.
	stepNoteBindings
)

// uninstallStep is one step of the plan.
type uninstallStep struct {
	kind stepKind
	// lines say what the step will do, as --dry-run prints them.
	lines []string
	// why is the reason for the step.
	why string
}

// uninstallPlan is the ordered steps of one uninstall.
type uninstallPlan struct {
	// refusal, when set, is why uninstall must not start: nothing runs.
	refusal error
	steps   []uninstallStep
	// left is what --force would leave behind, for the summary.
	left leftBehind
}

// objectState is what uninstall found of an object of the manifests.
type objectState int

const (
	objectAbsent objectState = iota
	objectPresent
	objectDeleting
)

// leaseView is a leader Lease and its live holder ("" when free, expired or
// absent).
type leaseView struct {
	key    types.NamespacedName
	holder string
}

// clusterView is what uninstall read of the cluster, for the planner.
type clusterView struct {
	// served: the cluster serves vacate.dev/v1alpha1.
	served      bool
	drains      []v1alpha1.NodeDrain
	nodes       []corev1.Node
	policies    []v1alpha1.DrainPolicy
	evacuations []v1alpha1.Evacuation
	providers   []v1alpha1.EvacuationProvider
	// hooked are the Evictions (Kubernetes' EvictionRequest API) with
	// vacate's finalizer vacate.dev/hook.
	hooked []types.NamespacedName
	// podNodes maps "namespace/name" and pod UIDs, of the pods on the
	// drains' nodes, to their node.
	podNodes map[string]string
	// objects is the state of each object of the install manifests, by
	// objectName.
	objects map[string]objectState
	// controllerPods counts the controller Deployment's pods.
	controllerPods int
	leases         []leaseView
	bindings       []rbacv1.ClusterRoleBinding
}

// uninstallChoices are the choices of the person uninstalling.
type uninstallChoices struct {
	cancelDrains, force, keepCRDs bool
}

// planUninstall orders the uninstall of what v shows.
func planUninstall(v clusterView, inst installed, o uninstallChoices) uninstallPlan {
	p := uninstallPlan{refusal: refusal(v, o)}
	p.add(stepCancelDrains, "the controller restores what each drain changed (uncordons what it cordoned) only while the drain exists and it runs",
		planCancel(v, o)...)
	p.add(stepStopController, "a controller that runs would add vacate's finalizers again once they are removed",
		planStop(v, inst, o)...)
	if o.force {
		lines, left := planUndoLeft(v)
		p.left = left
		p.add(stepUndoLeft, "--force: the controller may be gone or stuck; uninstall undoes only what provably is vacate's, and reports the rest", lines...)
	} else {
		p.add(stepCheckNoDrains, "a drain requested while the controller stopped would hold its node cordoned and the CRDs' deletion")
		p.add(stepReleaseProviders, "the controller keeps "+v1alpha1.FinalizerEvacuations+" on every EvacuationProvider; with no drain left none has work, "+
			"and once the controller is gone nothing else removes it (the providers, and vacate's CRDs, could not be deleted)", planProviders(v))
	}
	p.add(stepReleaseNodes, "nothing removes vacate.dev/drain once the controller is gone, and a deleted node would stay", planReleaseNodes(v))
	if len(v.hooked) > 0 || slices.ContainsFunc(v.evacuations, func(ev v1alpha1.Evacuation) bool { return ev.ForEviction() }) {
		p.add(stepReleaseEvictions, "the controller keeps "+er.FinalizerHook+" on an Eviction until the hook it called acknowledges a cancel; "+
			"once the controller is gone nothing removes it, and the Eviction would stay", planReleaseEvictions(v))
	}
	p.add(stepDeletePolicies, "they configure the controller that is gone", planPolicies(v, o))
	p.add(stepDeleteRest, "installed by 'vacate manifests install'; last created, first deleted",
		"rbac and namespace: "+planDeletes(inst.rest, v.objects).summary(true))
	p.add(stepDeleteCRDs, "last: deleting a CRD deletes every object of its kind, so nothing of vacate may need them any more", planCRDs(v, inst, o))
	if note := bindingsNote(v.bindings, inst.rest); note != "" {
		p.add(stepNoteBindings, "someone made them for people: uninstall leaves them", note)
	}
	return p
}

func (p *uninstallPlan) add(kind stepKind, why string, lines ...string) {
	p.steps = append(p.steps, uninstallStep{kind: kind, lines: lines, why: why})
}

// refusal is why uninstall must not start, or nil: drains without
// --cancel-drains, or drains that a trigger would request again at once.
func refusal(v clusterView, o uninstallChoices) error {
	if !v.served || len(v.drains) == 0 {
		return nil
	}
	if !o.cancelDrains {
		return fmt.Errorf("%d drain(s) in place: %s; every one, finished or not, must be cancelled so the controller restores its node "+
			"(uncordons it if vacate cordoned it): run 'vacate uninstall --cancel-drains' to do that, or 'vacate cancel' them first",
			len(v.drains), describeDrains(v.drains))
	}
	if held := triggered(v); len(held) > 0 {
		return fmt.Errorf("cannot cancel every drain: a trigger would request these again at once: %s; remove the taint or cordon, "+
			"or let the drain finish, then run uninstall again; nothing was changed", strings.Join(truncated(held, 5), ", "))
	}
	return nil
}

// triggered names the drains' nodes that a trigger of their policy would
// request again at once (a taint, a cordon, the node's own deletion), with
// the triggers' reasons. Under an ambiguous or unreadable policy the
// triggers do nothing.
func triggered(v clusterView) []string {
	var held []string
	for _, nd := range v.drains {
		i := slices.IndexFunc(v.nodes, func(n corev1.Node) bool { return n.Name == nd.Spec.NodeName })
		if i < 0 {
			continue
		}
		node := &v.nodes[i]
		p, err := policy.Choose(node.Labels, v.policies)
		if err != nil {
			continue
		}
		var reasons []string
		for _, r := range p.Triggers.Wanted(node) {
			reasons = append(reasons, r.Reason)
		}
		if len(reasons) > 0 {
			held = append(held, node.Name+" ("+strings.Join(reasons, "; ")+")")
		}
	}
	return held
}

func planCancel(v clusterView, o uninstallChoices) []string {
	switch {
	case !v.served:
		return []string{"drains: none (the cluster does not serve vacate's API)"}
	case len(v.drains) == 0:
		return []string{"drains: none"}
	}
	var then string
	if o.force {
		then = " (--force: those it does not restore within --timeout, uninstall restores as far as is safe)"
	}
	return []string{fmt.Sprintf("drains: would cancel %d: %s; the controller would restore their nodes%s", len(v.drains), describeDrains(v.drains), then)}
}

func planStop(v clusterView, inst installed, o uninstallChoices) []string {
	deploy := inst.deployment()
	r := planDeletes(inst.controller, v.objects)
	var lines []string
	if r.none() {
		lines = append(lines, fmt.Sprintf("controller: no Deployment %s/%s installed; nothing to delete", deploy.GetNamespace(), deploy.GetName()))
	} else {
		lines = append(lines, fmt.Sprintf("controller: %s; its %d pod(s) would stop", r.summary(true), v.controllerPods))
	}
	for _, l := range v.leases {
		switch {
		case l.holder != "" && o.force:
			lines = append(lines, fmt.Sprintf("controller: a vacate-controller holds Lease %s (%s); uninstall would wait until it stops, at most --timeout, then go on (--force)", l.key, l.holder))
		case l.holder != "":
			lines = append(lines, fmt.Sprintf("controller: a vacate-controller holds Lease %s (%s); uninstall would wait until it stops", l.key, l.holder))
		}
	}
	return lines
}

// planUndoLeft is what --force would do without the controller, if it
// restored nothing first: the nodes' cordons, the finalizers of the drains
// and providers; and what it would leave behind.
func planUndoLeft(v clusterView) ([]string, leftBehind) {
	var left leftBehind
	if v.served {
		left.evacuations = evacuationsLeft(v.evacuations)
		left.hooks = hooksLeft(v.drains, v.podNodes)
	}
	byName := make(map[string]*v1alpha1.NodeDrain, len(v.drains))
	for i := range v.drains {
		byName[v.drains[i].Name] = &v.drains[i]
	}
	var o nodeOutcomes
	for i := range v.nodes {
		node := &v.nodes[i]
		if _, marked := node.Annotations[v1alpha1.AnnotationCordonedBy]; !marked {
			continue
		}
		out := judgeCordon(node, byName)
		o.add(node.Name, out, node.Spec.Unschedulable)
		if out == outcomeKept {
			left.nodes = append(left.nodes, keptLine(node, notVacatesCordon(node, byName)))
		}
	}
	lines := []string{o.summary(true)}
	tainted, kept := daemonSetTaints(v.nodes, byName)
	left.nodes = append(left.nodes, kept...)
	if len(tainted) > 0 {
		lines = append(lines, fmt.Sprintf("nodes: would remove the taint %s that drains put on %d: %s", v1alpha1.TaintDaemonSetsOff,
			len(tainted), strings.Join(truncated(tainted, 5), ", ")))
	}
	if !v.served {
		return lines, left
	}
	if len(v.drains) > 0 {
		names := make([]string, 0, len(v.drains))
		for _, nd := range v.drains {
			names = append(names, nd.Name)
		}
		lines = append(lines, fmt.Sprintf("drains: would remove %s from %d: %s", v1alpha1.FinalizerRestore, len(names), strings.Join(truncated(names, 5), ", ")))
	}
	lines = append(lines, planProviders(v))
	var evs []string
	for _, ev := range v.evacuations {
		if slices.Contains(ev.Finalizers, v1alpha1.FinalizerCancel) {
			evs = append(evs, ev.Name)
		}
	}
	if len(evs) > 0 {
		lines = append(lines, fmt.Sprintf("evacuations: would remove %s from %d: %s", v1alpha1.FinalizerCancel, len(evs), strings.Join(truncated(evs, 5), ", ")))
	}
	return lines, left
}

// planProviders is the line for removing vacate.dev/evacuations from the
// EvacuationProviders that hold it.
func planProviders(v clusterView) string {
	if !v.served {
		return "evacuation providers: none (the cluster does not serve vacate's API)"
	}
	var held []string
	for _, p := range v.providers {
		if slices.Contains(p.Finalizers, v1alpha1.FinalizerEvacuations) {
			held = append(held, p.Name)
		}
	}
	if len(held) == 0 {
		return "evacuation providers: none holds " + v1alpha1.FinalizerEvacuations
	}
	return fmt.Sprintf("evacuation providers: would remove %s from %d: %s", v1alpha1.FinalizerEvacuations, len(held), strings.Join(truncated(held, 5), ", "))
}

// judgeCordon is what --force does with a node carrying vacate's
// annotation, as read.
func judgeCordon(node *corev1.Node, drains map[string]*v1alpha1.NodeDrain) cordonOutcome {
	switch {
	case notVacatesCordon(node, drains) != "":
		return outcomeKept
	case node.Spec.Unschedulable:
		return outcomeUncordoned
	}
	return outcomeUnmarked
}

// evacuationsLeft notes every Evacuation whose provider did not confirm a
// cancel for its current request: uninstall cannot undo a provider's work.
func evacuationsLeft(evs []v1alpha1.Evacuation) []string {
	var out []string
	for i := range evs {
		ev := &evs[i]
		if cancelConfirmed(ev) {
			continue
		}
		out = append(out, fmt.Sprintf("provider %s may still hold changes for node %s (Evacuation %s was %s); check the provider",
			ev.Spec.Provider, ev.Spec.NodeName, ev.Name, evacuationPhase(ev)))
	}
	return out
}

// hooksLeft notes the HTTP hooks of the drains that may not have been told
// to cancel (see noteHooks), from where their pods are (podNodes).
func hooksLeft(drains []v1alpha1.NodeDrain, podNodes map[string]string) []string {
	var out []string
	for _, nd := range drains {
		listed := map[string]bool{}
		for _, h := range nd.Status.Hooks {
			ref, isHook := strings.CutPrefix(h.Name, "pod/")
			if !isHook {
				continue
			}
			listed[ref] = true
			if h.Phase == string(v1alpha1.EvacuationCancelled) ||
				(h.Phase == string(v1alpha1.EvacuationCompleted) && podNodes[ref] != nd.Spec.NodeName) {
				continue
			}
			out = append(out, fmt.Sprintf("HTTP hook of pod %s on node %s may not have been told to cancel (drain %s, hook was %s); check the app",
				ref, nd.Spec.NodeName, nd.Name, h.Phase))
		}
		for _, c := range nd.Status.HookCalls {
			ref := podNodes["uid:"+c.UID]
			if ref == "" || c.Completed || listed[ref] || podNodes[ref] != nd.Spec.NodeName {
				continue
			}
			out = append(out, fmt.Sprintf("HTTP hook of pod %s on node %s may not have been told to cancel (drain %s, hook was called; status.hooks did not list it); check the app",
				ref, nd.Spec.NodeName, nd.Name))
		}
	}
	return out
}

func planReleaseNodes(v clusterView) string {
	held := 0
	for _, n := range v.nodes {
		if slices.Contains(n.Finalizers, v1alpha1.FinalizerDrain) {
			held++
		}
	}
	if held == 0 {
		return fmt.Sprintf("node finalizers: none of %d node(s) has %s", len(v.nodes), v1alpha1.FinalizerDrain)
	}
	return fmt.Sprintf("node finalizers: would remove %s from %d of %d node(s)", v1alpha1.FinalizerDrain, held, len(v.nodes))
}

func planReleaseEvictions(v clusterView) string {
	names := make([]string, 0, len(v.hooked))
	for _, k := range v.hooked {
		names = append(names, k.String())
	}
	line := fmt.Sprintf("eviction finalizers: would remove %s from %d Eviction(s): %s", er.FinalizerHook, len(v.hooked), strings.Join(truncated(names, 5), ", "))
	var evacs []string
	for i := range v.evacuations {
		if ev := &v.evacuations[i]; ev.ForEviction() {
			evacs = append(evacs, ev.Name)
		}
	}
	if len(evacs) > 0 {
		line += fmt.Sprintf("; would delete the %d Evacuation(s) vacate asked for them, without their providers' undo: %s", len(evacs), strings.Join(truncated(evacs, 5), ", "))
	}
	return line
}

func planPolicies(v clusterView, o uninstallChoices) string {
	names := make([]string, 0, len(v.policies))
	for _, p := range v.policies {
		names = append(names, p.Name)
	}
	switch {
	case !v.served:
		return "drain policies: none (the cluster does not serve vacate's API)"
	case len(names) == 0:
		return "drain policies: none"
	case o.keepCRDs:
		return fmt.Sprintf("drain policies: %d kept (--keep-crds): %s", len(names), strings.Join(truncated(names, 5), ", "))
	}
	return fmt.Sprintf("drain policies: would delete %d: %s", len(names), strings.Join(truncated(names, 5), ", "))
}

func planCRDs(v clusterView, inst installed, o uninstallChoices) string {
	if o.keepCRDs {
		return "crds: kept (--keep-crds): " + strings.Join(inst.crdNames(), ", ")
	}
	return "crds: " + planDeletes(inst.crds, v.objects).summary(true)
}

// planDeletes is what deleteAll would find of objs: last created first.
func planDeletes(objs []*unstructured.Unstructured, states map[string]objectState) deleted {
	var r deleted
	for _, o := range slices.Backward(objs) {
		name := objectName(o)
		switch states[name] {
		case objectAbsent:
			r.absent = append(r.absent, name)
		case objectDeleting:
			r.deleting = append(r.deleting, name)
		default:
			r.done = append(r.done, name)
		}
	}
	return r
}

// bindingsNote names the ClusterRoleBindings that bind vacate's
// ClusterRoles and that the manifests did not make, or "".
func bindingsNote(bindings []rbacv1.ClusterRoleBinding, rest []*unstructured.Unstructured) string {
	ours, roles := map[string]bool{}, map[string]bool{}
	for _, o := range rest {
		switch o.GetKind() {
		case "ClusterRoleBinding":
			ours[o.GetName()] = true
		case "ClusterRole":
			roles[o.GetName()] = true
		}
	}
	var left []string
	for _, b := range bindings {
		if roles[b.RoleRef.Name] && b.RoleRef.Kind == "ClusterRole" && !ours[b.Name] {
			left = append(left, b.Name+" (to "+b.RoleRef.Name+")")
		}
	}
	if len(left) == 0 {
		return ""
	}
	return fmt.Sprintf("note: ClusterRoleBinding(s) not made by 'vacate manifests install' still bind vacate's roles: %s; delete them if nobody needs them",
		strings.Join(truncated(left, 5), ", "))
}

// objectName names an object of the manifests for people: kind, then
// namespace/name or name.
func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}

// deployment is the controller's Deployment in the manifests, or nil.
func (i installed) deployment() *unstructured.Unstructured {
	for _, o := range i.controller {
		if o.GetKind() == "Deployment" {
			return o
		}
	}
	return nil
}

// crdNames names the CRDs of the manifests.
func (i installed) crdNames() []string {
	names := make([]string, 0, len(i.crds))
	for _, o := range i.crds {
		names = append(names, o.GetName())
	}
	return names
}

// write prints the plan for --dry-run: each step's lines and its reason,
// then what --force would leave behind.
func (p uninstallPlan) write(say func(string, ...any), force bool) {
	n := 0
	for _, s := range p.steps {
		if len(s.lines) == 0 {
			continue
		}
		n++
		for i, l := range s.lines {
			if i == 0 {
				say("%d. %s", n, l)
			} else {
				say("   %s", l)
			}
		}
		say("   why: %s", s.why)
	}
	if force {
		p.left.write(say, true)
	}
}

// daemonSetTaints judges the taints vacate.dev/draining on nodes: those
// whose value is the UID of the node's own drain (tainted: vacate put
// them there, --force removes them), and, for the others, what a person
// may do (vacate cannot tell it put them there).
func daemonSetTaints(nodes []corev1.Node, drains map[string]*v1alpha1.NodeDrain) (tainted, kept []string) {
	for i := range nodes {
		node := &nodes[i]
		for _, t := range node.Spec.Taints {
			if t.Key != v1alpha1.TaintDaemonSetsOff {
				continue
			}
			if nd := drains[node.Name]; nd != nil && string(nd.UID) == t.Value {
				tainted = append(tainted, node.Name)
				continue
			}
			kept = append(kept, fmt.Sprintf("node %s keeps the taint %s=%s, which names no drain of the node; if nobody needs it: kubectl taint node %s %s-",
				node.Name, t.Key, t.Value, node.Name, t.Key))
		}
	}
	return tainted, kept
}
