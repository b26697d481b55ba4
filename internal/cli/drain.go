package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"

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
	timeout   time.Duration
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

With --wait, shows progress until every drain ended: on a terminal a live view
(one bar per node, the phase, what blocks which pod and for how long, an ETA);
otherwise one line per change, for logs and scripts. Then a summary.

Exit codes: 0 drained, 1 failed or cancelled, 2 usage error, 3 timed out (the
drains go on in the cluster).`,
		Example: `  # Drain a node for maintenance and follow it
  vacate drain node-1 --wait --reason "kernel upgrade, CHG-1234"

  # Drain every node of a pool that goes away, giving up waiting after 30 minutes
  vacate drain --selector pool=old --mode Decommission --wait --timeout 30m

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
	f.StringVar(&o.policy, "policy", "", "the DrainPolicy to apply (default: the policy named \"default\", else built-in defaults)")
	o.requester.addFlag(f, "your requester name on the NodeDrain (default: cli:<your user name as the API server knows it>)")
	f.BoolVarP(&o.wait, "wait", "w", false, "show progress until the drains end")
	f.DurationVar(&o.timeout, "timeout", 0, "with --wait, stop waiting after this long and exit 3 (0: wait as long as it takes); implies --wait")
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
	}
	return nil
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
	checkControllers(ctx, s, o.streams, o.clock.Now())
	for _, node := range nodes {
		nd, err := o.request(ctx, s, node, requester)
		if err != nil {
			return err
		}
		others := otherRequesters(nd, requester)
		switch {
		case len(others) > 0:
			fmt.Fprintf(o.streams.Out, "nodedrain/%s joined as %s (also requested by %s), mode %s\n", node, requester, strings.Join(others, ", "), nd.Spec.Mode)
		default:
			fmt.Fprintf(o.streams.Out, "nodedrain/%s requested by %s, mode %s\n", node, requester, nd.Spec.Mode)
		}
	}
	if !o.wait && o.timeout == 0 {
		return nil
	}
	return waitForDrains(ctx, s, o.streams, o.clock, nodes, o.timeout)
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
	err = requests.Apply(ctx, s.client, node, v1alpha1.Requester{Name: requester, Reason: reason}, v1alpha1.DrainMode(mode), policyName)
	switch {
	case apierrors.IsConflict(err):
		return nil, fmt.Errorf("node %s is already being drained with other settings (%s); drop --mode/--policy to join the drain as it is, or ask its requesters",
			node, conflictFields(err))
	case apierrors.IsInvalid(err):
		return nil, fmt.Errorf("the API server refused the drain of node %s: %s", node, apiMessage(err))
	case err != nil:
		return nil, s.explain(err, "requesting the drain of node "+node)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := s.client.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		return nil, s.explain(err, "reading NodeDrain "+node)
	}
	return nd, nil
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
