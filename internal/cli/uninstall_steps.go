package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// This file is uninstall's executor: the steps of the plan
// (uninstall_plan.go), in the order they run, each reading again what it
// acts on. What --force does in place of the check that no drain is left
// is in uninstall_force.go.

// Step 1: drains.

// cancelAll deletes the drains uninstall read (the plan checked that it may:
// --cancel-drains, no trigger that would request them again), so the
// controller restores their nodes, and waits until all are gone.
func (u *uninstaller) cancelAll(ctx context.Context, drains []v1alpha1.NodeDrain) error {
	if !u.served {
		u.say("drains: none (the cluster does not serve vacate's API)")
		return nil
	}
	if len(drains) == 0 {
		u.say("drains: none")
		return nil
	}
	u.say("drains: cancelling %d: %s; waiting for the controller to restore their nodes", len(drains), describeDrains(drains))
	uids := map[types.UID]bool{}
	for i := range drains {
		nd := &drains[i]
		uids[nd.UID] = true
		if !nd.DeletionTimestamp.IsZero() {
			continue // already being restored
		}
		if err := u.s.client.Delete(ctx, nd, client.Preconditions{UID: &nd.UID}); err != nil && !apierrors.IsNotFound(err) {
			return u.explain(err, "deleting NodeDrain "+nd.Name)
		}
	}
	var left, again []v1alpha1.NodeDrain // the cancelled ones, new ones
	err := u.poll(ctx, func(ctx context.Context) (bool, error) {
		now := &v1alpha1.NodeDrainList{}
		if err := u.s.client.List(ctx, now); err != nil {
			return false, u.explain(err, "listing NodeDrains")
		}
		left, again = nil, nil
		for _, nd := range now.Items {
			if uids[nd.UID] {
				left = append(left, nd)
			} else {
				again = append(again, nd)
			}
		}
		return len(left) == 0, nil
	})
	switch {
	case errors.Is(err, errWaitTimedOut) && u.force:
		u.say("drains: %d still there after %s: %s; the controller did not restore them: "+
			"uninstall restores what is safe itself once the controller is stopped (--force)", len(left), u.timeout, describeDrains(left))
		return nil
	case errors.Is(err, errWaitTimedOut):
		return fmt.Errorf("%d drain(s) still there after %s: %s; the vacate controller must be running to restore their nodes: "+
			"start it (see 'vacate status'), then run uninstall again; or run 'vacate uninstall --cancel-drains --force' to finish without it: "+
			"it uncordons only the nodes whose %s names a drain that exists by name and UID, removes vacate's finalizers "+
			"and reports what it leaves behind; nothing else was removed", len(left), u.timeout, describeDrains(left), v1alpha1.AnnotationCordonedBy)
	case err != nil:
		return u.waitErr(ctx, err, "the restores")
	}
	if len(again) > 0 && u.force {
		u.say("drains: requested again after the cancel: %s; uninstall restores what is safe itself once the controller is stopped (--force)", describeDrains(again))
	} else if len(again) > 0 {
		return fmt.Errorf("drain(s) requested again after the cancel: %s; remove what requests them, then run uninstall again; nothing else was removed", describeDrains(again))
	}
	return u.sayRestored(ctx, drains)
}

// sayRestored reports what became of the restored drains' nodes.
func (u *uninstaller) sayRestored(ctx context.Context, drains []v1alpha1.NodeDrain) error {
	schedulable, cordoned, gone := 0, 0, 0
	for _, nd := range drains {
		node := &corev1.Node{}
		err := u.s.client.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
		switch {
		case apierrors.IsNotFound(err):
			gone++
		case err != nil:
			return u.explain(err, "reading node "+nd.Spec.NodeName)
		case node.Spec.Unschedulable:
			cordoned++
		default:
			schedulable++
		}
	}
	msg := fmt.Sprintf("drains: %d cancelled and restored: %d node(s) schedulable again", len(drains), schedulable)
	if cordoned > 0 {
		msg += fmt.Sprintf(", %d left cordoned (vacate did not cordon them)", cordoned)
	}
	if gone > 0 {
		msg += fmt.Sprintf(", %d node(s) no longer exist", gone)
	}
	u.say("%s", msg)
	return nil
}

// describeDrains names drains with their phase and requesters, the first
// few of them.
func describeDrains(drains []v1alpha1.NodeDrain) string {
	out := make([]string, 0, len(drains))
	for _, nd := range drains {
		phase := string(nd.Status.Phase)
		switch {
		case !nd.DeletionTimestamp.IsZero():
			phase = "being restored"
		case phase == "":
			phase = string(v1alpha1.PhasePending)
		}
		who := "no requester"
		if len(nd.Spec.Requesters) > 0 {
			who = "for " + requesterList(&nd)
		}
		out = append(out, fmt.Sprintf("%s (%s, %s)", nd.Name, phase, who))
	}
	return strings.Join(truncated(out, 5), ", ")
}

func truncated(items []string, n int) []string {
	if len(items) <= n {
		return items
	}
	return append(slices.Clone(items[:n]), fmt.Sprintf("and %d more", len(items)-n))
}

// Step 2: the controller.

// stopController deletes the controller's Deployment and PDB and waits
// until its pods are gone and no vacate-controller holds the leader Lease
// (one run outside the cluster included), so nothing re-adds vacate's
// finalizers once they are removed.
func (u *uninstaller) stopController(ctx context.Context) error {
	deploy := u.deployment()
	if deploy == nil {
		return errors.New("the install manifests hold no Deployment") // a broken build
	}
	installed, err := u.installedDeployment(ctx, deploy)
	if err != nil {
		return err
	}
	leases := controllerLeases(installed, u.lease)
	r, err := u.deleteAll(ctx, u.controller)
	if err != nil {
		return err
	}
	ns := deploy.GetNamespace()
	selector, err := podSelector(deploy)
	if err != nil {
		return err
	}
	pods, err := u.s.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return u.explain(err, "listing the controller's pods")
	}
	running := len(pods.Items)
	if r.none() {
		u.say("controller: no Deployment %s/%s installed; nothing to delete", ns, deploy.GetName())
	} else {
		u.say("controller: %s; waiting for its %d pod(s) to stop", r.summary(false), running)
	}
	err = u.poll(ctx, func(ctx context.Context) (bool, error) {
		pods, err = u.s.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, u.explain(err, "listing the controller's pods")
		}
		return len(pods.Items) == 0, nil
	})
	switch {
	case errors.Is(err, errWaitTimedOut) && u.force:
		msg := fmt.Sprintf("%d pod(s) of vacate-controller still in namespace %s after %s", len(pods.Items), ns, u.timeout)
		u.say("controller: %s; going on (--force)", msg)
		u.left.controller = append(u.left.controller, fmt.Sprintf("%s: one that runs may add vacate's finalizers again; see 'kubectl get pods -n %s -l %s'",
			msg, ns, selector))
	case errors.Is(err, errWaitTimedOut):
		return fmt.Errorf("%d pod(s) of vacate-controller still in namespace %s after %s: they would add vacate's finalizers again; "+
			"see 'kubectl get pods -n %s -l %s', then run uninstall again", len(pods.Items), ns, u.timeout, ns, selector)
	case err != nil:
		return u.waitErr(ctx, err, "the controller's pods to stop")
	}
	return u.waitForLeases(ctx, leases)
}

func podSelector(deploy *unstructured.Unstructured) (string, error) {
	match, _, err := unstructured.NestedStringMap(deploy.Object, "spec", "selector", "matchLabels")
	if err != nil || len(match) == 0 {
		return "", fmt.Errorf("the install manifests' Deployment has no spec.selector.matchLabels: %v", err)
	}
	return labels.SelectorFromSet(match).String(), nil
}

// leaseHolder is who holds the Lease now, or "" (free, expired, absent).
func (u *uninstaller) leaseHolder(ctx context.Context, key types.NamespacedName) (string, error) {
	l, err := u.s.clientset.CoordinationV1().Leases(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", u.explain(err, "reading Lease "+key.String())
	}
	sp := l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity == "" || sp.RenewTime == nil || sp.LeaseDurationSeconds == nil {
		return "", nil
	}
	if u.clk.Since(sp.RenewTime.Time) > time.Duration(*sp.LeaseDurationSeconds)*time.Second {
		return "", nil // expired: its holder stopped without releasing it
	}
	return *sp.HolderIdentity, nil
}

// waitForLeases waits until no vacate-controller holds a leader Lease: one
// that runs outside the Deployment would re-add vacate's finalizers.
func (u *uninstaller) waitForLeases(ctx context.Context, leases []types.NamespacedName) error {
	for _, key := range leases {
		holder, err := u.leaseHolder(ctx, key)
		if err != nil {
			return err
		}
		if holder == "" {
			continue
		}
		u.say("controller: a vacate-controller still holds Lease %s (%s); waiting until it stops", key, holder)
		err = u.poll(ctx, func(ctx context.Context) (bool, error) {
			holder, err = u.leaseHolder(ctx, key)
			return holder == "", err
		})
		switch {
		case errors.Is(err, errWaitTimedOut) && u.force:
			msg := fmt.Sprintf("a vacate-controller outside the Deployment still holds Lease %s as %s after %s", key, holder, u.timeout)
			u.say("controller: %s; going on (--force)", msg)
			u.left.controller = append(u.left.controller, msg+": it may add vacate's finalizers again; stop it ('vacate dev controller': Ctrl-C)")
		case errors.Is(err, errWaitTimedOut):
			return fmt.Errorf("a vacate-controller outside the Deployment still runs (it holds Lease %s as %s after %s): "+
				"stop it ('vacate dev controller': Ctrl-C), then run uninstall again", key, holder, u.timeout)
		case err != nil:
			return u.waitErr(ctx, err, "the vacate-controller to stop")
		}
	}
	return nil
}

// checkNoDrains: with the controller stopped, no drain may be left (a
// trigger could request one while the controller stopped): deleting the
// CRDs would hang on its finalizer, and its node may be cordoned.
func (u *uninstaller) checkNoDrains(ctx context.Context) error {
	if !u.served {
		return nil
	}
	list := &v1alpha1.NodeDrainList{}
	if err := u.s.client.List(ctx, list); err != nil {
		return u.explain(err, "listing NodeDrains")
	}
	if len(list.Items) > 0 {
		return fmt.Errorf("drain(s) requested while the controller stopped: %s; install the controller again "+
			"('vacate manifests install'), then run uninstall again", describeDrains(list.Items))
	}
	return nil
}

// Step 3: node finalizers.

// releaseNodes removes vacate's finalizer from every node that has it.
func (u *uninstaller) releaseNodes(ctx context.Context) error {
	nodes, err := u.s.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return u.explain(err, "listing nodes")
	}
	var held []string
	for _, n := range nodes.Items {
		if slices.Contains(n.Finalizers, v1alpha1.FinalizerDrain) {
			held = append(held, n.Name)
		}
	}
	if len(held) == 0 {
		u.say("node finalizers: none of %d node(s) has %s", len(nodes.Items), v1alpha1.FinalizerDrain)
		return nil
	}
	removed := 0
	for _, name := range held {
		done, err := u.removeFinalizer(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, v1alpha1.FinalizerDrain)
		if err != nil {
			return u.explain(err, "removing finalizer "+v1alpha1.FinalizerDrain+" from node "+name)
		}
		if done {
			removed++
		}
	}
	u.say("node finalizers: removed %s from %d of %d node(s)", v1alpha1.FinalizerDrain, removed, len(nodes.Items))
	return nil
}

// releaseEvictions removes vacate's finalizer from the Evictions that have
// it: the controller that would have removed it is gone. A hook the
// controller was cancelling may not have been told; it is named.
func (u *uninstaller) releaseEvictions(ctx context.Context) error {
	hooked, err := u.hookedEvictions(ctx)
	if err != nil {
		return err
	}
	var removed []string
	for _, k := range hooked {
		done, err := u.removeFinalizer(ctx, &lifecyclev1alpha1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}, er.FinalizerHook)
		if err != nil {
			return u.explain(err, "removing finalizer "+er.FinalizerHook+" from Eviction "+k.String())
		}
		if done {
			removed = append(removed, k.String())
		}
	}
	if len(removed) == 0 {
		u.say("eviction finalizers: none left to remove")
	} else {
		u.say("eviction finalizers: removed %s from %d Eviction(s): %s; vacate was cancelling their pods' HTTP hooks, which may not have been told: check those apps",
			er.FinalizerHook, len(removed), strings.Join(truncated(removed, 5), ", "))
	}
	deleted, err := u.deleteEvictionEvacuations(ctx)
	if err != nil || len(deleted) == 0 {
		return err
	}
	u.say("evictions' evacuations: deleted %d Evacuation(s) vacate asked for pods' Evictions, without their providers' undo: %s; those providers may still keep those nodes' data moved (or the nodes ineligible)",
		len(deleted), strings.Join(truncated(deleted, 5), ", "))
	return nil
}

// deleteEvictionEvacuations deletes the Evacuations that vacate's responder
// asked for pods' Evictions (Evacuation.ForEviction), vacate.dev/cancel
// removed first: with the controller gone, nobody would undo them, and no
// owner takes them away.
func (u *uninstaller) deleteEvictionEvacuations(ctx context.Context) ([]string, error) {
	if !u.served {
		return nil, nil
	}
	list := &v1alpha1.EvacuationList{}
	if err := u.s.client.List(ctx, list, client.HasLabels{v1alpha1.LabelEviction}); err != nil {
		return nil, u.explain(err, "listing the Evacuations of Evictions")
	}
	var out []string
	for i := range list.Items {
		ev := &list.Items[i]
		if !ev.ForEviction() {
			continue
		}
		key := &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: ev.Name, UID: ev.UID}}
		if _, err := u.removeFinalizer(ctx, key, v1alpha1.FinalizerCancel); err != nil {
			return nil, u.explain(err, "removing finalizer "+v1alpha1.FinalizerCancel+" from Evacuation "+ev.Name)
		}
		if err := u.s.client.Delete(ctx, ev, client.Preconditions{UID: &ev.UID}); err != nil && !apierrors.IsNotFound(err) {
			return nil, u.explain(err, "deleting Evacuation "+ev.Name)
		}
		out = append(out, fmt.Sprintf("%s (provider %s, node %s)", ev.Name, ev.Spec.Provider, ev.Spec.NodeName))
	}
	return out, nil
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// removeFinalizer drops finalizer from obj (its kind and name are read; a
// UID set on it must still match, so an object created again under the name
// is left alone) with a JSON patch that first tests the finalizers are what
// was read, so another's finalizer added meanwhile is never lost; a failed
// test reads the object again. It reports whether it removed the finalizer.
func (u *uninstaller) removeFinalizer(ctx context.Context, obj client.Object, finalizer string) (bool, error) {
	uid, key := obj.GetUID(), client.ObjectKeyFromObject(obj)
	removed := false
	err := retry.OnError(retry.DefaultRetry, patchTestFailed, func() error {
		err := u.s.client.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil || (uid != "" && obj.GetUID() != uid) || !slices.Contains(obj.GetFinalizers(), finalizer) {
			return err
		}
		kept := slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == finalizer })
		patch, err := json.Marshal([]jsonPatchOp{
			{Op: "test", Path: "/metadata/uid", Value: obj.GetUID()},
			{Op: "test", Path: "/metadata/finalizers", Value: obj.GetFinalizers()},
			{Op: "replace", Path: "/metadata/finalizers", Value: kept},
		})
		if err != nil {
			return err
		}
		err = u.s.client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch))
		if apierrors.IsNotFound(err) {
			return nil
		}
		removed = err == nil
		return err
	})
	return removed, err
}

// Step 4: policies, RBAC, CRDs.

func (u *uninstaller) deletePolicies(ctx context.Context) error {
	if !u.served {
		u.say("drain policies: none (the cluster does not serve vacate's API)")
		return nil
	}
	list := &v1alpha1.DrainPolicyList{}
	if err := u.s.client.List(ctx, list); err != nil {
		return u.explain(err, "listing DrainPolicies")
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	switch {
	case len(names) == 0:
		u.say("drain policies: none")
		return nil
	case u.keepCRDs:
		u.say("drain policies: %d kept (--keep-crds): %s", len(names), strings.Join(truncated(names, 5), ", "))
		return nil
	}
	for i := range list.Items {
		if err := u.s.client.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return u.explain(err, "deleting DrainPolicy "+list.Items[i].Name)
		}
	}
	u.say("drain policies: deleted %d: %s", len(names), strings.Join(truncated(names, 5), ", "))
	return nil
}

func (u *uninstaller) deleteRest(ctx context.Context) error {
	r, err := u.deleteAll(ctx, u.rest)
	if err != nil {
		return err
	}
	u.say("rbac and namespace: %s", r.summary(false))
	return nil
}

func (u *uninstaller) deleteCRDs(ctx context.Context) error {
	if u.keepCRDs {
		u.say("crds: kept (--keep-crds): %s", strings.Join(u.crdNames(), ", "))
		return nil
	}
	r, err := u.deleteAll(ctx, u.crds)
	if err != nil {
		return err
	}
	u.say("crds: %s", r.summary(false))
	return nil
}

// noteBindings names the ClusterRoleBindings that bind vacate's
// ClusterRoles and that uninstall leaves: someone made them for people.
func (u *uninstaller) noteBindings(ctx context.Context) error {
	list, err := u.s.clientset.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return u.explain(err, "listing ClusterRoleBindings")
	}
	if note := bindingsNote(list.Items, u.rest); note != "" {
		u.say("%s", note)
	}
	return nil
}

// deleted counts what deleteAll found.
type deleted struct {
	done, deleting, absent []string
}

func (r deleted) none() bool { return len(r.done) == 0 && len(r.deleting) == 0 }

func (r deleted) summary(dryRun bool) string {
	var parts []string
	if len(r.done) > 0 {
		verb := "deleted"
		if dryRun {
			verb = "would delete"
		}
		parts = append(parts, fmt.Sprintf("%s %d: %s", verb, len(r.done), strings.Join(r.done, ", ")))
	}
	if len(r.deleting) > 0 {
		parts = append(parts, fmt.Sprintf("%d already being deleted: %s", len(r.deleting), strings.Join(r.deleting, ", ")))
	}
	if len(r.absent) > 0 {
		parts = append(parts, fmt.Sprintf("%d not there", len(r.absent)))
	}
	return strings.Join(parts, "; ")
}

// deleteAll deletes objects of the install manifests, last created first.
// Objects that are absent or already being deleted are left as they are;
// so are kinds the cluster does not serve.
func (u *uninstaller) deleteAll(ctx context.Context, objs []*unstructured.Unstructured) (deleted, error) {
	var r deleted
	for _, want := range slices.Backward(objs) {
		name := objectName(want)
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(want.GroupVersionKind())
		err := u.s.client.Get(ctx, client.ObjectKeyFromObject(want), obj)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			r.absent = append(r.absent, name)
			continue
		case err != nil:
			return r, u.explain(err, "reading "+name)
		case obj.GetDeletionTimestamp() != nil:
			r.deleting = append(r.deleting, name)
			continue
		}
		err = u.s.client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())})
		if err != nil && !apierrors.IsNotFound(err) {
			return r, u.explain(err, "deleting "+name)
		}
		r.done = append(r.done, name)
	}
	return r, nil
}
