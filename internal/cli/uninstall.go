package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/leader"
)

type uninstallOptions struct {
	flags        *genericclioptions.ConfigFlags
	streams      Streams
	clk          clock.PassiveClock
	cancelDrains bool
	force        bool
	keepCRDs     bool
	dryRun       dryRun
	timeout      time.Duration
	// lease names the Lease of a controller run outside the Deployment.
	lease types.NamespacedName
}

func newUninstallCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.PassiveClock) *cobra.Command {
	o := &uninstallOptions{flags: flags, streams: s, clk: clk}
	cmd := &cobra.Command{
		Use:   "uninstall [--cancel-drains] [--force] [--keep-crds] [--dry-run]",
		Short: "Remove vacate from the cluster, giving every node back first",
		Long: `Removes what 'vacate manifests install' created, in an order that leaves
no node behind:

  1. drains: every NodeDrain is deleted, so the running controller undoes it
     (uncordons the node if vacate cordoned it; pods that left stay away).
     Finished drains count too: a Drained node stays cordoned until its
     NodeDrain goes. This needs --cancel-drains; without it, uninstall
     refuses while any drain exists. It also refuses, changing nothing,
     when a trigger would request a drain again at once (the node is
     tainted vacate.dev/drain, for example): remove the trigger first. It
     waits (--timeout) until the controller has restored every node.
  2. controller: the Deployment vacate-controller and its PDB are deleted,
     and uninstall waits until its pods and any vacate-controller holding
     a leader Lease have stopped, so nothing re-adds vacate's finalizers:
     the Deployment's Lease (its --leader-election-id and
     --leader-election-namespace) and the one --lease-namespace and
     --lease-name name (a controller run outside the cluster).
  3. finalizers: once no drain is left, vacate.dev/evacuations is removed
     from the EvacuationProviders (the controller keeps it on every
     provider while it runs), and vacate.dev/drain (policy
     triggers.onNodeDelete: Drain) from every node; other finalizers are
     kept.
  4. the DrainPolicies, the namespace, service account and RBAC objects,
     the ClusterRoles vacate-controller, vacate-controller-force-delete,
     vacate-controller-surge and vacate-user, the
     ValidatingAdmissionPolicies, and the CRDs (--keep-crds keeps the CRDs
     and the DrainPolicies).

With --force, uninstall finishes where the controller is gone or stuck.
It still asks the controller first (step 1, for at most --timeout); then,
in place of step 3's check that no drain is left, it does the safe part of
the undo itself: a node whose vacate.dev/cordoned-by is exactly
<drain name>/<drain uid> of a NodeDrain that exists, for that node, is
uncordoned and the annotation removed, in one JSON patch that first tests
both, so a concurrent change fails it instead of undoing someone else's
cordon. Any other node with that annotation is left cordoned and reported.
It removes vacate.dev/restore from the NodeDrains and vacate.dev/evacuations
from the EvacuationProviders, goes on past a controller that does not stop,
and ends with what it left behind: those nodes, evacuations whose provider
did not confirm a cancel (uninstall cannot undo a provider's work), HTTP
hooks that may not have been told to cancel, a controller still running.
It exits non-zero only when a request fails, not for what it reports.

Uninstall reads the cluster first and plans every step from what it read;
--dry-run prints that plan, each step with its reason, and changes nothing.
Objects already gone are skipped, so uninstall can be run again. Uninstalling
needs cluster admin rights.`,
		Example: `  # See what would be done, changing nothing
  vacate uninstall --cancel-drains --dry-run

  # Cancel every drain (their nodes are restored), then remove vacate
  vacate uninstall --cancel-drains

  # The controller is gone: finish without it, and see what is left behind
  vacate uninstall --cancel-drains --force --timeout 1m

  # Remove the controller but keep the CRDs and DrainPolicies, for a reinstall
  vacate uninstall --keep-crds`,
		Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.cancelDrains, "cancel-drains", false, "cancel every drain, finished or not, and wait until the controller has restored their nodes")
	f.BoolVar(&o.force, "force", false, "finish without the controller if it does not restore the drains within --timeout: "+
		"uncordon only the nodes vacate provably cordoned, remove vacate's finalizers, report what is left behind")
	f.BoolVar(&o.keepCRDs, "keep-crds", false, "keep the CRDs and the DrainPolicies")
	addDryRun(f, &o.dryRun, "client: print what would be done, and change nothing (server is not offered: each step waits for the one before it to take effect, which a server-side dry run never does)",
		dryRunClient)
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for each step: the restores, the controller to stop (0: as long as it takes)")
	f.StringVar(&o.lease.Namespace, "lease-namespace", leader.DefaultLeaseNamespace,
		"namespace of the leader Lease of a vacate-controller run outside the installed Deployment (the Deployment's own Lease is read from its flags)")
	f.StringVar(&o.lease.Name, "lease-name", leader.DefaultLeaseName, "name of that Lease")
	return cmd
}

// uninstaller runs one uninstall.
type uninstaller struct {
	*uninstallOptions
	s *session
	// served: the cluster serves vacate.dev/v1alpha1 (the CRDs are there).
	served bool
	installed
	// left is what --force could not undo, for the summary.
	left leftBehind
}

// installed are the objects 'vacate manifests install' creates, in the
// order it creates them, by role.
type installed struct {
	crds, controller, rest []*unstructured.Unstructured
}

func (o *uninstallOptions) run(ctx context.Context) error {
	if o.timeout < 0 {
		return argsError{fmt.Sprintf("--timeout %s: must not be negative", o.timeout)}
	}
	if o.force && o.timeout == 0 {
		return argsError{"--force --timeout 0: --force needs a bounded --timeout, how long to wait for the controller before it restores nodes itself"}
	}
	objs, err := installedObjects()
	if err != nil {
		return err
	}
	s, err := dial(o.flags)
	if err != nil {
		return err
	}
	u := &uninstaller{uninstallOptions: o, s: s, installed: objs}
	if u.served, err = s.servesVacate(); err != nil {
		return u.explain(err, "checking for vacate's API")
	}
	v, err := u.read(ctx)
	if err != nil {
		return err
	}
	plan := planUninstall(v, objs, uninstallChoices{cancelDrains: o.cancelDrains, force: o.force, keepCRDs: o.keepCRDs})
	if plan.refusal != nil {
		return plan.refusal
	}
	if o.dryRun.client() {
		plan.write(u.say, o.force)
		u.say("dry run: nothing was changed in %s", s.where)
		return nil
	}
	if err := u.execute(ctx, plan, v); err != nil {
		return err
	}
	if o.force {
		u.left.write(u.say, false)
	}
	if o.keepCRDs {
		u.say("vacate is uninstalled from %s; its CRDs and DrainPolicies are kept", s.where)
	} else {
		u.say("vacate is uninstalled from %s", s.where)
	}
	return nil
}

// execute runs the plan's steps in order. Each step after a wait reads
// again what it acts on: the controller restores drains and removes
// finalizers meanwhile.
func (u *uninstaller) execute(ctx context.Context, plan uninstallPlan, v clusterView) error {
	for _, step := range plan.steps {
		var err error
		switch step.kind {
		case stepCancelDrains:
			err = u.cancelAll(ctx, v.drains)
		case stepStopController:
			err = u.stopController(ctx)
		case stepCheckNoDrains:
			err = u.checkNoDrains(ctx)
		case stepUndoLeft:
			err = u.undoLeft(ctx)
		case stepReleaseProviders:
			if u.served {
				err = u.releaseProviders(ctx)
			}
		case stepReleaseNodes:
			err = u.releaseNodes(ctx)
		case stepDeletePolicies:
			err = u.deletePolicies(ctx)
		case stepDeleteRest:
			err = u.deleteRest(ctx)
		case stepDeleteCRDs:
			err = u.deleteCRDs(ctx)
		case stepNoteBindings:
			err = u.noteBindings(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (u *uninstaller) say(format string, args ...any) {
	fmt.Fprintf(u.streams.Out, format+"\n", args...)
}

// explain is session.explain, with what an uninstall needs when permission
// is denied.
func (u *uninstaller) explain(err error, doing string) error {
	err = u.s.explain(err, doing)
	var pe permissionError
	if errors.As(err, &pe) {
		pe.need = "uninstalling vacate needs cluster admin rights (it deletes CRDs, ClusterRoles and the controller): run it as a cluster admin"
		return pe
	}
	return err
}

// installedObjects decodes what 'vacate manifests install' prints.
func installedObjects() (installed, error) {
	docs, err := manifest("install", "vacate-controller", "", bindings{forceDelete: true, surge: true}) // with the optional bindings, if any
	if err != nil {
		return installed{}, err
	}
	agentDocs, err := manifest("agent", "", "vacate-agent", bindings{}) // and the agent, if installed
	if err != nil {
		return installed{}, err
	}
	docs = append(docs, agentDocs...)
	objs, err := decodeManifests(strings.Join(docs, "\n---\n"))
	if err != nil {
		return installed{}, fmt.Errorf("decoding the install manifests: %w", err)
	}
	var out installed
	for _, obj := range objs {
		switch obj.GetKind() {
		case "CustomResourceDefinition":
			out.crds = append(out.crds, obj)
		case "Deployment", "PodDisruptionBudget":
			out.controller = append(out.controller, obj)
		default:
			out.rest = append(out.rest, obj)
		}
	}
	return out, nil
}

// decodeManifests decodes a multi-document YAML stream, skipping documents
// of comments only.
func decodeManifests(text string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096).Decode(&obj.Object); err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

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

// errWaitTimedOut: a wait of uninstall took longer than --timeout.
var errWaitTimedOut = errors.New("timed out")

// poll runs cond until it holds, for at most --timeout (0: no limit). The
// requests run under ctx, never cut short by the timeout itself.
func (u *uninstaller) poll(ctx context.Context, cond wait.ConditionWithContextFunc) error {
	deadline := u.clk.Now().Add(u.timeout)
	return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(context.Context) (bool, error) {
		ok, err := cond(ctx)
		if !ok && err == nil && u.timeout > 0 && !u.clk.Now().Before(deadline) {
			return false, errWaitTimedOut
		}
		return ok, err
	})
}

// waitErr explains an error of a wait that did not time out.
func (u *uninstaller) waitErr(ctx context.Context, err error, what string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("stopped waiting for %s: interrupted; run uninstall again to finish", what)
	}
	return err
}
