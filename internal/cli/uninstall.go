package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/internal/leader"
)

// This file is 'vacate uninstall': the command and its flow. Uninstall reads
// the cluster (uninstall_read.go), plans every step from what it read
// (uninstall_plan.go), then prints the plan (--dry-run) or runs its steps
// (uninstall_steps.go, uninstall_force.go). Here too: what the install
// manifests create, and the waits the steps share.

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
		case stepReleaseEvictions:
			err = u.releaseEvictions(ctx)
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
