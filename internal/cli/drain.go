package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/progress"
	"github.com/vacate-dev/vacate/internal/requests"
)

type drainOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	clock   clock.WithTicker
	targets
	reason    string
	mode      string
	policy    string
	requester requesterFlag
	wait      bool
	// timeout gives up, as kubectl drain's: the request is withdrawn.
	timeout time.Duration
	// waitTimeout only stops waiting: the drains go on.
	waitTimeout time.Duration
	dryRun      dryRun
	// kubectl drain's flags (docs/kubectl-drain.md).
	ignoreDaemonSets, deleteEmptyDirData, force, disableEviction bool
	gracePeriod                                                  int64
	podSelector                                                  string
	// gather leaves the drains without a batch (Requester.Batch): they
	// wait for the policy's batchWindow, to be gathered with drains other
	// commands request.
	gather bool
	// batch is this command's batch of drains; nil with --gather.
	batch *v1alpha1.RequestBatch
}

func newDrainCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &drainOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "drain NODE... | --selector SELECTOR",
		Short: "Request drains of nodes, and follow them with --wait",
		Long: `Requests a drain of each node: creates its NodeDrain, or joins it if one
exists, with you as a requester (server-side apply, field manager
vacate-cli:<you>). The vacate controller cordons the node, moves the pods off
through the Eviction API with every PodDisruptionBudget respected, and reports.
The nodes of one command are one batch: once all of their drains are requested
they start (all cordoned first) without waiting for the policy's batchWindow;
--gather waits for it, to be gathered with drains other commands request.

With --wait, shows progress until every drain ended: on a terminal a live view
(one bar per node, the phase, what blocks which pod and for how long, an ETA);
otherwise one line per change, for logs and scripts. Then a summary.

kubectl drain's flags --delete-emptydir-data, --force, --grace-period and
--pod-selector become overrides on your requester entry, each allowed by its
verb on the drain's DrainPolicy (docs/kubectl-drain.md); --ignore-daemonsets
is accepted; --disable-eviction is refused.

Exit codes: 0 drained, 1 failed or cancelled, 2 usage error, 3 gave up
(--timeout: your request withdrawn) or stopped waiting (--wait-timeout: the
drains go on in the cluster).`,
		Example: `  # Drain a node for maintenance and follow it
  vacate drain node-1 --wait --reason "kernel upgrade, CHG-1234"

  # Drain every node of a pool that goes away; stop waiting after 30 minutes (the drains go on)
  vacate drain --selector pool=old --mode Decommission --wait-timeout 30m

  # As kubectl drain: emptyDir pods too, give up (withdraw the request) after 10 minutes
  vacate drain node-1 --ignore-daemonsets --delete-emptydir-data --timeout 10m

  # What would happen with these flags, writing nothing; then ask the API server without storing
  vacate drain node-1 --force --dry-run=client
  vacate drain node-1 --force --dry-run=server

  # Ask, do not wait; follow later with 'vacate status --watch'
  vacate drain node-1 node-2`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	o.targets.addFlag(f, "drain")
	f.StringVar(&o.reason, "reason", "", "why, for people (a ticket, a change number); shown in status")
	f.StringVar(&o.mode, "mode", "", "Maintenance (the node comes back) or Decommission (it goes away); default: the drain's current mode, Maintenance for a new one")
	f.StringVar(&o.policy, "policy", "", "the DrainPolicy to apply (default: the one policy whose nodeSelector matches the node, else the policy named \"default\", else built-in defaults)")
	o.requester.addFlag(f, "your requester name on the NodeDrain (default: cli:<your user name as the API server knows it>)")
	f.BoolVarP(&o.wait, "wait", "w", false, "show progress until the drains end")
	f.DurationVar(&o.timeout, "timeout", 0, "give up after this long, as kubectl drain does: withdraw your request on the nodes not yet drained (the last requester out restores a node) and exit 3 (0: as long as it takes); implies --wait")
	f.DurationVar(&o.waitTimeout, "wait-timeout", 0, "stop waiting after this long and exit 3, leaving the drains to go on (0: wait as long as it takes); implies --wait")
	addDryRun(f, &o.dryRun, "none, client (plan the drain with your flags, as 'vacate plan' does, and write nothing) or server (send the request as a server-side dry run: the API server checks it, its RBAC and admission policies, and stores nothing)",
		dryRunClient, dryRunServer)
	// kubectl drain's flags, mapped (docs/kubectl-drain.md).
	f.BoolVar(&o.ignoreDaemonSets, "ignore-daemonsets", false, "accepted for kubectl drain's habit: vacate leaves DaemonSet pods unless the DrainPolicy's pods.daemonSets is Evict")
	f.BoolVar(&o.deleteEmptyDirData, "delete-emptydir-data", false, "evict pods with emptyDir volumes too (their data is lost): an override of the policy's pods.localStorage, needing the verb delete-emptydir-data on the DrainPolicy")
	f.BoolVar(&o.force, "force", false, "evict pods that no controller recreates too: an override of the policy's pods.unmanaged, needing the verb delete-unmanaged on the DrainPolicy")
	f.Int64Var(&o.gracePeriod, "grace-period", -1, "seconds each pod gets to stop, when shorter than the policy's (-1: each pod's own): an override needing the verb grace-period on the DrainPolicy")
	f.StringVar(&o.podSelector, "pod-selector", "", "move only the pods this label selector matches; the others stay: an override needing the verb pod-selector on the DrainPolicy")
	f.BoolVar(&o.gather, "gather", false, "wait for the DrainPolicy's batchWindow before the drains start, to gather them with drains that other commands request soon (a script that drains node by node); "+
		"without it the nodes of this command are one batch, which starts as soon as all of its drains are requested")
	f.BoolVar(&o.disableEviction, "disable-eviction", false, "refused: vacate never deletes pods past their PodDisruptionBudgets (see docs/kubectl-drain.md for what a policy offers instead)")
	_ = f.MarkHidden("disable-eviction")
	_ = cmd.RegisterFlagCompletionFunc("policy", completePolicies(flags))
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	return cmd
}

func (o *drainOptions) validate(args []string) error {
	if err := o.targets.check("drain", "the nodes to drain", args); err != nil {
		return err
	}
	if err := o.requester.check(); err != nil {
		return err
	}
	switch {
	case o.mode != "" && o.mode != string(v1alpha1.ModeMaintenance) && o.mode != string(v1alpha1.ModeDecommission):
		return argsError{fmt.Sprintf("--mode %q: must be Maintenance or Decommission", o.mode)}
	case o.timeout < 0:
		return argsError{fmt.Sprintf("--timeout %s: must not be negative", o.timeout)}
	case o.waitTimeout < 0:
		return argsError{fmt.Sprintf("--wait-timeout %s: must not be negative", o.waitTimeout)}
	case o.timeout > 0 && o.waitTimeout > 0:
		return argsError{"--timeout gives up (withdraws your request) and --wait-timeout only stops waiting: choose one"}
	case o.dryRun.any() && (o.wait || o.timeout > 0 || o.waitTimeout > 0):
		return argsError{"--dry-run requests nothing, so there is nothing to wait for: drop --wait, --timeout and --wait-timeout"}
	case o.disableEviction:
		return argsError{"--disable-eviction is refused: vacate moves pods only through the Eviction API, so every PodDisruptionBudget holds; " +
			"'vacate explain NODE' says which budget blocks and what to change, and a DrainPolicy's timeouts.onTimeout: ForceDelete, which a cluster admin sets, " +
			"deletes what is left when the drain's time is up (docs/kubectl-drain.md)"}
	case o.gracePeriod == 0 || o.gracePeriod < -1:
		return argsError{fmt.Sprintf("--grace-period %d: must be 1 or more (-1: each pod's own); vacate never deletes pods at once", o.gracePeriod)}
	}
	if o.podSelector != "" {
		if _, err := labels.Parse(o.podSelector); err != nil {
			return argsError{fmt.Sprintf("--pod-selector %q: %v", o.podSelector, err)}
		}
	}
	return nil
}

// overrides are the kubectl drain flags given, as the requester's
// overrides; nil without any.
func (o *drainOptions) overrides() *v1alpha1.PodOverrides {
	ov := &v1alpha1.PodOverrides{DeleteEmptyDirData: o.deleteEmptyDirData, DeleteUnmanaged: o.force, PodSelector: o.podSelector}
	if o.gracePeriod > 0 {
		g := o.gracePeriod
		ov.GracePeriodSeconds = &g
	}
	if *ov == (v1alpha1.PodOverrides{}) {
		return nil
	}
	return ov
}

func (o *drainOptions) run(ctx context.Context, args []string) error {
	if err := o.validate(args); err != nil {
		return err
	}
	s, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	nodes, err := s.nodeNames(ctx, args, o.selector)
	if err != nil {
		return err
	}
	if o.policy != "" {
		if err := s.policyExists(ctx, o.policy); err != nil {
			return err
		}
	}
	requester, err := o.requester.resolve(ctx, s, o.flags)
	if err != nil {
		return err
	}
	if o.dryRun.client() {
		// What the drain would do with these flags: the plan, as this
		// requester would join it. Nothing is written.
		p := &planOptions{flags: o.flags, streams: o.streams, clock: o.clock, policy: o.policy, planChoices: planChoices{mode: o.mode,
			as: &v1alpha1.Requester{Name: requester, Overrides: o.overrides()}}}
		return p.run(ctx, nodes)
	}
	checkControllers(ctx, s, o.streams, o.clock.Now())
	if !o.gather {
		o.batch = &v1alpha1.RequestBatch{ID: newBatchID(), Size: int32(len(nodes))}
	}
	for _, node := range nodes {
		nd, err := o.request(ctx, s, node, requester)
		if err != nil {
			return err
		}
		others := otherRequesters(nd, requester)
		suffix := ""
		if o.dryRun.server() {
			suffix = " (server dry run)"
		}
		switch {
		case len(others) > 0:
			fmt.Fprintf(o.streams.Out, "nodedrain/%s joined as %s (also requested by %s), mode %s%s\n", node, requester, strings.Join(others, ", "), nd.Spec.Mode, suffix)
		default:
			fmt.Fprintf(o.streams.Out, "nodedrain/%s requested by %s, mode %s%s\n", node, requester, nd.Spec.Mode, suffix)
		}
	}
	if o.dryRun.any() || (!o.wait && o.timeout == 0 && o.waitTimeout == 0) {
		return nil
	}
	if o.timeout == 0 {
		return waitForDrains(ctx, s, o.streams, o.clock, nodes, o.waitTimeout)
	}
	err = waitForDrains(ctx, s, o.streams, o.clock, nodes, o.timeout)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != ExitTimeout || ctx.Err() != nil {
		return err
	}
	return o.giveUp(ctx, s, nodes, requester)
}

// giveUp withdraws the request on every node not yet Drained, as kubectl
// drain gives up at its --timeout: the last requester out restores a node.
func (o *drainOptions) giveUp(ctx context.Context, s *session, nodes []string, requester string) error {
	var withdrawn []string
	c := &cancelOptions{streams: o.streams}
	for _, node := range nodes {
		nd := &v1alpha1.NodeDrain{}
		err := s.client.Get(ctx, types.NamespacedName{Name: node}, nd)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return s.explain(err, "reading NodeDrain "+node)
		case nd.Status.Phase == v1alpha1.PhaseDrained:
			continue
		}
		if _, _, err := c.cancel(ctx, s, node, requester); err != nil {
			return err
		}
		withdrawn = append(withdrawn, node)
	}
	return exitError{code: ExitTimeout, err: fmt.Errorf("gave up after %s (--timeout, as kubectl drain): withdrew the request of %s on %s; "+
		"use --wait-timeout to stop waiting and leave the drains going", o.timeout, requester, strings.Join(withdrawn, ", "))}
}

// request applies this requester's entry on the node's NodeDrain. On a
// drain that exists, the apply restates its mode and policy (so this
// manager shares them rather than dropping them) and keeps the requester's
// reason unless a new one is given; asking for another mode or policy than
// the drain has is refused, never applied over the other requesters.
func (o *drainOptions) request(ctx context.Context, s *session, node, requester string) (*v1alpha1.NodeDrain, error) {
	existing := &v1alpha1.NodeDrain{}
	err := s.client.Get(ctx, types.NamespacedName{Name: node}, existing)
	found := err == nil
	switch {
	case found && !existing.DeletionTimestamp.IsZero():
		return nil, fmt.Errorf("the drain of node %s is being cancelled and undone; request it again once 'vacate status %s' no longer lists it", node, node)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, s.explain(err, "reading NodeDrain "+node)
	}
	mode, policyName, reason := o.mode, o.policy, o.reason
	if others := otherRequesters(existing, requester); found && len(others) > 0 {
		if mode != "" && mode != string(existing.Spec.Mode) {
			return nil, fmt.Errorf("node %s is already being drained in mode %s for %s; drop --mode to join it, or ask them",
				node, existing.Spec.Mode, strings.Join(others, ", "))
		}
		if policyName != "" && policyName != existing.Spec.PolicyName {
			return nil, fmt.Errorf("node %s is already being drained under policy %q for %s; drop --policy to join it, or ask them",
				node, orDefault(existing.Spec.PolicyName), strings.Join(others, ", "))
		}
	}
	if found {
		if mode == "" {
			mode = string(existing.Spec.Mode)
		}
		if policyName == "" {
			policyName = existing.Spec.PolicyName
		}
		if i := requests.Index(existing, requester); i >= 0 && reason == "" {
			reason = existing.Spec.Requesters[i].Reason
		}
	}
	c := client.Client(s.client)
	if o.dryRun.server() {
		c = client.NewDryRunClient(s.client)
	}
	err = requests.Apply(ctx, c, node, v1alpha1.Requester{Name: requester, Reason: reason, Overrides: o.overrides(), Batch: o.batch}, v1alpha1.DrainMode(mode), policyName)
	switch {
	case apierrors.IsConflict(err):
		return nil, fmt.Errorf("node %s is already being drained with other settings (%s); drop --mode/--policy to join the drain as it is, or ask its requesters",
			node, conflictFields(err))
	case apierrors.IsInvalid(err):
		return nil, fmt.Errorf("the API server refused the drain of node %s: %s", node, apiMessage(err))
	case apierrors.IsInternalError(err) && policyName != "" && (!found || policyName != existing.Spec.PolicyName):
		// Naming a policy sends the request to vacate-controller's webhook
		// (a person may name only a policy that selects the node), which
		// fails closed.
		return nil, fmt.Errorf("the API server could not check that DrainPolicy %s may govern node %s: vacate-controller's admission webhook checks it "+
			"and did not answer (is vacate-controller running? 'vacate version' says); drain without --policy to use the policy that selects the node, "+
			"or try again once it runs (%s)", policyName, node, apiMessage(err))
	case err != nil:
		return nil, s.explain(err, "requesting the drain of node "+node)
	case o.dryRun.server():
		// Nothing was stored: what the request would make.
		nd := existing.DeepCopy()
		if !found {
			nd = &v1alpha1.NodeDrain{Spec: v1alpha1.NodeDrainSpec{NodeName: node, Mode: v1alpha1.DrainMode(orMaintenance(mode))}}
		}
		nd.Spec.Requesters = withRequester(nd.Spec.Requesters, v1alpha1.Requester{Name: requester})
		return nd, nil
	}
	nd := &v1alpha1.NodeDrain{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		return nil, s.explain(err, "reading NodeDrain "+node)
	}
	return nd, nil
}

// newBatchID names a command's batch of drains (Requester.Batch).
func newBatchID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func orMaintenance(mode string) string {
	if mode == "" {
		return string(v1alpha1.ModeMaintenance)
	}
	return mode
}

func orDefault(policyName string) string {
	if policyName == "" {
		return "(default)"
	}
	return policyName
}

func otherRequesters(nd *v1alpha1.NodeDrain, me string) []string {
	var out []string
	for _, r := range nd.Spec.Requesters {
		if r.Name != me {
			out = append(out, r.Name)
		}
	}
	return out
}

// conflictFields names the fields of an apply conflict, from the causes
// the API server lists.
func conflictFields(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return apiMessage(err)
	}
	var parts []string
	for _, c := range status.Status().Details.Causes {
		parts = append(parts, strings.TrimSpace(c.Message+" "+c.Field))
	}
	if len(parts) == 0 {
		return apiMessage(err)
	}
	return strings.Join(parts, "; ")
}

func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// waitForDrains follows the drains and ends with a summary. The result is
// nil when every drain is Drained, an exitError otherwise.
func waitForDrains(ctx context.Context, s *session, streams Streams, clk clock.WithTicker, nodes []string, timeout time.Duration) error {
	f := progress.NewFollower(streams.Out, clk, nodes)
	err := f.Until(ctx, s.client, timeout, nil)
	fmt.Fprintln(streams.Out)
	if serr := f.Tracker.Summary(streams.Out, clk.Now()); serr != nil {
		return serr
	}
	_, failed, running := f.Tracker.Counts()
	switch {
	case errors.Is(err, progress.ErrTimedOut):
		return exitError{code: ExitTimeout, err: fmt.Errorf("timed out after %s with %d drain(s) still running; they go on in the cluster: follow with 'vacate status --watch', ask why with 'vacate explain NODE', stop with 'vacate cancel NODE'", timeout, running)}
	case errors.Is(err, context.Canceled):
		return exitError{code: ExitTimeout, err: fmt.Errorf("stopped waiting with %d drain(s) still running; they go on in the cluster", running)}
	case err != nil:
		return s.explain(err, "watching NodeDrains")
	case running > 0: // cannot happen: the follower returns only when all ended
		return exitError{code: ExitTimeout, err: fmt.Errorf("stopped waiting with %d drain(s) still running", running)}
	case failed > 0:
		return exitError{code: ExitError, err: fmt.Errorf("%d of %d drain(s) failed or were cancelled; see 'vacate explain NODE'", failed, len(nodes))}
	}
	return nil
}
