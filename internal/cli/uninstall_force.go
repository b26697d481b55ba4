package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// This file is the step of 'uninstall --force' that replaces checkNoDrains:
// the controller did not restore every drain (it is gone or stuck) and is
// stopped now, so uninstall does the safe part of the undo itself and
// remembers what it cannot undo for the summary.

// leftBehind is what uninstall --force could not undo, one line each.
type leftBehind struct {
	controller, nodes, evacuations, hooks []string
}

// write prints the summary that ends uninstall --force, or for --dry-run
// what it would leave.
func (l leftBehind) write(say func(string, ...any), dryRun bool) {
	lines := make([]string, 0, len(l.controller)+len(l.nodes)+len(l.evacuations)+len(l.hooks))
	lines = append(append(append(append(lines, l.controller...), l.nodes...), l.evacuations...), l.hooks...)
	switch {
	case len(lines) == 0 && dryRun:
		say("would leave behind: nothing, if the controller does not restore the drains first")
	case len(lines) == 0:
		say("left behind: nothing")
	case dryRun:
		say("would leave behind, if the controller does not restore the drains first:")
	default:
		say("left behind:")
	}
	for _, l := range lines {
		say("  %s", l)
	}
}

// undoLeft does, without the controller, the part of its undo that is safe:
// from a fresh read (the controller may have restored some drains while
// uninstall waited), it uncordons the nodes vacate provably cordoned,
// removes vacate's finalizers from the NodeDrains, EvacuationProviders and
// Evacuations,
// and notes, as the planner does (planUndoLeft), what it cannot undo: nodes
// it cannot prove it cordoned, evacuations whose provider did not confirm a
// cancel, HTTP hooks that may not have been told. The notes are taken
// before the drains go: the garbage collector deletes their Evacuations
// with them.
func (u *uninstaller) undoLeft(ctx context.Context) error {
	v, err := u.read(ctx)
	if err != nil {
		return err
	}
	_, notes := planUndoLeft(v)
	u.left.evacuations, u.left.hooks = notes.evacuations, notes.hooks
	if err := u.restoreNodes(ctx, v.drains); err != nil {
		return err
	}
	if err := u.removeDaemonSetTaints(ctx, v); err != nil {
		return err
	}
	if !u.served {
		return nil
	}
	if err := u.releaseDrains(ctx, v.drains); err != nil {
		return err
	}
	if err := u.releaseProviders(ctx); err != nil {
		return err
	}
	return u.releaseEvacuations(ctx)
}

// notVacatesCordon says why the node's vacate.dev/cordoned-by does not prove
// that vacate cordoned it, or "" when it does: it is exactly <name>/<uid> of
// a drain that exists, of this node, which recorded no other node UID.
func notVacatesCordon(node *corev1.Node, drains map[string]*v1alpha1.NodeDrain) string {
	name, _, hasUID := v1alpha1.CordonedBy(node)
	if nd := drains[name]; nd != nil {
		return nd.NotItsCordon(node)
	}
	if !hasUID {
		return "names no drain UID (written before vacate recorded one, or by hand)"
	}
	return fmt.Sprintf("names drain %s, which does not exist", name)
}

// cordonOutcome is what restoreNode did with one node.
type cordonOutcome int

const (
	// outcomeUncordoned: vacate's cordon was undone, its annotation removed.
	outcomeUncordoned cordonOutcome = iota
	// outcomeUnmarked: the node was schedulable already; vacate's
	// annotation was removed.
	outcomeUnmarked
	// outcomeKept: the annotation does not prove vacate's cordon; the node
	// was left as it is.
	outcomeKept
	// outcomeGone: the node or its annotation went meanwhile.
	outcomeGone
)

// nodeOutcomes names the nodes by outcome, for the summary line.
type nodeOutcomes struct {
	uncordoned, unmarked, cordoned, marked []string
}

func (o *nodeOutcomes) add(name string, out cordonOutcome, cordoned bool) {
	switch {
	case out == outcomeUncordoned:
		o.uncordoned = append(o.uncordoned, name)
	case out == outcomeUnmarked:
		o.unmarked = append(o.unmarked, name)
	case out == outcomeKept && cordoned:
		o.cordoned = append(o.cordoned, name)
	case out == outcomeKept:
		o.marked = append(o.marked, name)
	}
}

func (o nodeOutcomes) summary(dryRun bool) string {
	verb := func(done, would string) string {
		if dryRun {
			return would
		}
		return done
	}
	var parts []string
	if len(o.uncordoned) > 0 {
		parts = append(parts, fmt.Sprintf("%s %d that vacate cordoned: %s", verb("uncordoned", "would uncordon"),
			len(o.uncordoned), strings.Join(truncated(o.uncordoned, 5), ", ")))
	}
	if len(o.unmarked) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s from %d schedulable already: %s", verb("removed", "would remove"),
			v1alpha1.AnnotationCordonedBy, len(o.unmarked), strings.Join(truncated(o.unmarked, 5), ", ")))
	}
	if len(o.cordoned) > 0 {
		parts = append(parts, fmt.Sprintf("%s %d cordoned that vacate cannot prove it cordoned: %s (see below)", verb("left", "would leave"),
			len(o.cordoned), strings.Join(truncated(o.cordoned, 5), ", ")))
	}
	if len(o.marked) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s on %d schedulable that it cannot match to a drain: %s (see below)", verb("left", "would leave"),
			v1alpha1.AnnotationCordonedBy, len(o.marked), strings.Join(truncated(o.marked, 5), ", ")))
	}
	if len(parts) == 0 {
		return "nodes: none carries " + v1alpha1.AnnotationCordonedBy
	}
	return "nodes: " + strings.Join(parts, "; ")
}

// restoreNodes undoes vacate's cordon on every node that provably has it,
// and notes the nodes whose vacate.dev/cordoned-by proves nothing.
func (u *uninstaller) restoreNodes(ctx context.Context, drains []v1alpha1.NodeDrain) error {
	byName := make(map[string]*v1alpha1.NodeDrain, len(drains))
	for i := range drains {
		byName[drains[i].Name] = &drains[i]
	}
	nodes, err := u.s.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return u.explain(err, "listing nodes")
	}
	var o nodeOutcomes
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if _, marked := node.Annotations[v1alpha1.AnnotationCordonedBy]; !marked {
			continue
		}
		out, seen, err := u.restoreNode(ctx, node, byName)
		if err != nil {
			return u.explain(err, "uncordoning node "+node.Name)
		}
		if out == outcomeUncordoned { // vacate's drain of it: the drain conditions are vacate's too
			if err := u.clearDrainConditions(ctx, seen); err != nil {
				return u.explain(err, "removing the drain conditions of node "+node.Name)
			}
		}
		o.add(node.Name, out, seen.Spec.Unschedulable)
		if out == outcomeKept {
			u.left.nodes = append(u.left.nodes, keptLine(seen, notVacatesCordon(seen, byName)))
		}
	}
	u.say("%s", o.summary(false))
	return nil
}

// clearDrainConditions removes the node conditions DrainInProgress and
// Drained, which vacate's drain of the node set (the controller removes
// them in its undo), leaving every other condition alone (a strategic merge
// patch that deletes by type).
func (u *uninstaller) clearDrainConditions(ctx context.Context, node *corev1.Node) error {
	var del []map[string]any
	for _, c := range node.Status.Conditions {
		if slices.Contains(v1alpha1.NodeDrainConditions, c.Type) {
			del = append(del, map[string]any{"type": c.Type, "$patch": "delete"})
		}
	}
	if len(del) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": del}})
	if err != nil {
		return err
	}
	_, err = u.s.clientset.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// keptLine says why a node was left as it is, and what a person may do.
func keptLine(node *corev1.Node, why string) string {
	value := node.Annotations[v1alpha1.AnnotationCordonedBy]
	if node.Spec.Unschedulable {
		return fmt.Sprintf("node %s stays cordoned: its %s %q %s: vacate cannot tell it cordoned the node; if nobody else did: "+
			"kubectl uncordon %s && kubectl annotate node %s %s-", node.Name, v1alpha1.AnnotationCordonedBy, value, why,
			node.Name, node.Name, v1alpha1.AnnotationCordonedBy)
	}
	return fmt.Sprintf("node %s is schedulable but keeps its %s %q, which %s; remove it if nobody needs it: kubectl annotate node %s %s-",
		node.Name, v1alpha1.AnnotationCordonedBy, value, why, node.Name, v1alpha1.AnnotationCordonedBy)
}

// restoreNode decides from node, as read, whether vacate cordoned it and, if
// so, uncordons it and removes the annotation in one JSON patch that first
// tests both are still what was read: a concurrent change (someone cordoned
// it again, the annotation changed) fails the patch instead of undoing
// another's cordon, and the node is read and judged again. It returns the
// outcome and the node it last judged.
func (u *uninstaller) restoreNode(ctx context.Context, node *corev1.Node, drains map[string]*v1alpha1.NodeDrain) (cordonOutcome, *corev1.Node, error) {
	out, reread := outcomeGone, false
	err := retry.OnError(retry.DefaultRetry, patchTestFailed, func() error {
		if reread {
			fresh, err := u.s.clientset.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				out = outcomeGone
				return nil
			}
			if err != nil {
				return err
			}
			node = fresh
		}
		reread = true
		value, marked := node.Annotations[v1alpha1.AnnotationCordonedBy]
		if !marked {
			out = outcomeGone
			return nil
		}
		if out = judgeCordon(node, drains); out == outcomeKept {
			return nil
		}
		patch, err := uncordonPatch(value, node.Spec.Unschedulable)
		if err != nil {
			return err
		}
		_, err = u.s.clientset.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			out = outcomeGone
			return nil
		}
		return err
	})
	return out, node, err
}

// uncordonPatch is the JSON patch that removes vacate's cordon record (the
// annotation value read) and, when the node was read cordoned, the cordon:
// each only if it is still what was read.
func uncordonPatch(value string, cordoned bool) ([]byte, error) {
	path := "/metadata/annotations/" + jsonPointerEscape(v1alpha1.AnnotationCordonedBy)
	ops := []jsonPatchOp{{Op: "test", Path: path, Value: value}}
	if cordoned {
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: "/spec/unschedulable", Value: true},
			jsonPatchOp{Op: "replace", Path: "/spec/unschedulable", Value: false})
	}
	ops = append(ops, jsonPatchOp{Op: "remove", Path: path})
	return json.Marshal(ops)
}

// jsonPointerEscape escapes one reference token of a JSON pointer (RFC 6901).
func jsonPointerEscape(token string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
}

// patchTestFailed: a JSON patch's test failed (the object changed since it
// was read), or a write raced: read again and decide again.
func patchTestFailed(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsConflict(err)
}

// cancelConfirmed: the provider answered Cancelled to a Cancel request, for
// the current generation (as the controller judges it).
func cancelConfirmed(ev *v1alpha1.Evacuation) bool {
	return ev.Spec.Desired == v1alpha1.DesiredCancel && ev.Status.Phase == v1alpha1.EvacuationCancelled &&
		ev.Status.ObservedGeneration == ev.Generation
}

// evacuationPhase is the provider's last word, for people.
func evacuationPhase(ev *v1alpha1.Evacuation) string {
	switch {
	case ev.Status.Phase == "":
		return string(v1alpha1.EvacuationPending)
	case ev.Status.ObservedGeneration != ev.Generation:
		return string(ev.Status.Phase) + " for an earlier request"
	}
	return string(ev.Status.Phase)
}

// releaseDrains removes vacate.dev/restore from the drains left, deleting
// first those requested since the cancel, so that each goes.
func (u *uninstaller) releaseDrains(ctx context.Context, drains []v1alpha1.NodeDrain) error {
	if len(drains) == 0 {
		return nil
	}
	names := make([]string, 0, len(drains))
	for _, nd := range drains {
		names = append(names, nd.Name)
	}
	for i := range drains {
		nd := &drains[i]
		if nd.DeletionTimestamp.IsZero() {
			err := u.s.client.Delete(ctx, nd, client.Preconditions{UID: &nd.UID})
			if err != nil && !apierrors.IsNotFound(err) {
				return u.explain(err, "deleting NodeDrain "+nd.Name)
			}
		}
		key := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: nd.Name, UID: nd.UID}}
		if _, err := u.removeFinalizer(ctx, key, v1alpha1.FinalizerRestore); err != nil {
			return u.explain(err, "removing finalizer "+v1alpha1.FinalizerRestore+" from NodeDrain "+nd.Name)
		}
	}
	u.say("drains: removed %s from %d: %s", v1alpha1.FinalizerRestore, len(names), strings.Join(truncated(names, 5), ", "))
	return nil
}

// releaseProviders removes vacate.dev/evacuations from every
// EvacuationProvider: with the controller gone nobody else would, and the
// provider could never be deleted (nor vacate's CRDs).
func (u *uninstaller) releaseProviders(ctx context.Context) error {
	list := &v1alpha1.EvacuationProviderList{}
	if err := u.s.client.List(ctx, list); err != nil {
		return u.explain(err, "listing EvacuationProviders")
	}
	keys := make([]client.Object, 0, len(list.Items))
	for i := range list.Items {
		p := &list.Items[i]
		keys = append(keys, &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID, Finalizers: p.Finalizers}})
	}
	held, err := u.releaseAll(ctx, "EvacuationProvider", v1alpha1.FinalizerEvacuations, keys)
	switch {
	case err != nil:
		return err
	case len(held) == 0:
		u.say("evacuation providers: none holds %s", v1alpha1.FinalizerEvacuations)
	default:
		u.say("evacuation providers: removed %s from %d: %s", v1alpha1.FinalizerEvacuations, len(held), strings.Join(truncated(held, 5), ", "))
	}
	return nil
}

// releaseEvacuations removes vacate.dev/cancel from every Evacuation: with
// the controller gone nobody else would, and the Evacuation could never be
// deleted (nor vacate's CRDs). What its provider did is noted in what is
// left behind.
func (u *uninstaller) releaseEvacuations(ctx context.Context) error {
	list := &v1alpha1.EvacuationList{}
	if err := u.s.client.List(ctx, list); err != nil {
		return u.explain(err, "listing Evacuations")
	}
	keys := make([]client.Object, 0, len(list.Items))
	for i := range list.Items {
		ev := &list.Items[i]
		keys = append(keys, &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: ev.Name, UID: ev.UID, Finalizers: ev.Finalizers}})
	}
	held, err := u.releaseAll(ctx, "Evacuation", v1alpha1.FinalizerCancel, keys)
	if err == nil && len(held) > 0 {
		u.say("evacuations: removed %s from %d: %s", v1alpha1.FinalizerCancel, len(held), strings.Join(truncated(held, 5), ", "))
	}
	return err
}

// releaseAll removes finalizer from each of objs (name, UID and finalizers
// as read) that holds it, and returns their names.
func (u *uninstaller) releaseAll(ctx context.Context, kind, finalizer string, objs []client.Object) ([]string, error) {
	var held []string
	for _, obj := range objs {
		if !slices.Contains(obj.GetFinalizers(), finalizer) {
			continue
		}
		held = append(held, obj.GetName())
		obj.SetFinalizers(nil)
		if _, err := u.removeFinalizer(ctx, obj, finalizer); err != nil {
			return held, u.explain(err, "removing finalizer "+finalizer+" from "+kind+" "+obj.GetName())
		}
	}
	return held, nil
}

// removeDaemonSetTaints removes the taint vacate.dev/draining from the
// nodes whose own drain put it there (its value is the drain's UID), each
// in a JSON patch that first tests the taint is still the one judged; the
// others are noted in what is left behind.
func (u *uninstaller) removeDaemonSetTaints(ctx context.Context, v clusterView) error {
	byName := make(map[string]*v1alpha1.NodeDrain, len(v.drains))
	for i := range v.drains {
		byName[v.drains[i].Name] = &v.drains[i]
	}
	tainted, kept := daemonSetTaints(v.nodes, byName)
	u.left.nodes = append(u.left.nodes, kept...)
	removed := 0
	for i := range v.nodes {
		node := &v.nodes[i]
		if !slices.Contains(tainted, node.Name) {
			continue
		}
		for j, t := range node.Spec.Taints {
			if t.Key != v1alpha1.TaintDaemonSetsOff || t.Value != string(byName[node.Name].UID) {
				continue
			}
			patch, err := json.Marshal([]map[string]any{
				{"op": "test", "path": fmt.Sprintf("/spec/taints/%d/key", j), "value": t.Key},
				{"op": "test", "path": fmt.Sprintf("/spec/taints/%d/value", j), "value": t.Value},
				{"op": "remove", "path": fmt.Sprintf("/spec/taints/%d", j)},
			})
			if err != nil {
				return err
			}
			_, err = u.s.clientset.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
			switch {
			case err == nil:
				removed++
			case apierrors.IsNotFound(err), apierrors.IsInvalid(err): // gone, or changed since: left as it is now
			default:
				return u.explain(err, "removing the taint "+v1alpha1.TaintDaemonSetsOff+" from node "+node.Name)
			}
			break
		}
	}
	if removed > 0 {
		u.say("nodes: removed the taint %s that drains put on %d", v1alpha1.TaintDaemonSetsOff, removed)
	}
	return nil
}
