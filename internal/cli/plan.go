package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// This file is 'vacate plan', a dry run that only reads: the command and its
// flow. For each node, plan reads what a drain would meet (plan_read.go),
// decides from that alone, as the controller would, what the drain would do
// with the node and each pod (plan_decide.go, plan_evacuations.go), and
// prints it (plan_print.go) as a NodePlan (plan_types.go).

type planOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	clock   clock.WithTicker
	targets
	policy string
	output string
	planChoices
}

// planChoices are the flags that change what a plan decides, beside the
// objects it read.
type planChoices struct {
	// mode is the drain mode to plan for; "" for the drain's own.
	mode string
	// allowLoopback plans hooks as a controller run with
	// --allow-loopback-hooks calls them.
	allowLoopback bool
	// as plans with this requester's entry added to the drain's (vacate
	// drain --dry-run=client: its overrides count).
	as *v1alpha1.Requester
}

func newPlanCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &planOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "plan NODE... | --selector SELECTOR",
		Short: "Preview drains without changing anything",
		Long: `A dry run that only reads: for each node, which pods a drain would evict,
leave in place or be blocked by, and why (the same planner the controller
uses, with the same DrainPolicy, honouring pods' own annotations only where
the policy does); which PodDisruptionBudgets would block now (disruptions
allowed against the pods on the node); whose HTTP evacuation hook the
controller would call before the pod's eviction, and where, or why not;
which EvacuationProviders it would ask, and which pods each would hold; the
node's Evacuations; and an estimate of how long the evictions take, and
what bounds the evacuations.`,
		Example: `  # What would draining node-1 do?
  vacate plan node-1

  # A whole pool, under a stricter policy, as JSON
  vacate plan --selector pool=old --policy strict -o json

  # Which providers would a decommission ask?
  vacate plan node-1 --mode Decommission`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	f := cmd.Flags()
	o.targets.addFlag(f, "plan for")
	f.StringVar(&o.policy, "policy", "", "plan with this DrainPolicy (default: the drain's own, else the one policy whose nodeSelector matches the node, else \"default\", else built-in defaults)")
	f.StringVarP(&o.output, "output", "o", "", "output format: json, yaml, name, jsonpath=TEMPLATE or custom-columns=NAME:.path,... (default, and wide: text)")
	f.StringVar(&o.mode, "mode", "", "plan a drain in this mode, Maintenance or Decommission (default: the drain's current mode, Maintenance for a new one)")
	f.BoolVar(&o.allowLoopback, "allow-loopback-hooks", false, "plan HTTP hooks as a vacate-controller run with --allow-loopback-hooks calls them (development clusters, whose pods have loopback addresses)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("mode", completeModes)
	_ = cmd.RegisterFlagCompletionFunc("policy", completePolicies(flags))
	return cmd
}

func (o *planOptions) run(ctx context.Context, args []string) error {
	if err := o.targets.check("plan", "the nodes to plan for", args); err != nil {
		return err
	}
	// wide is the text, which has every detail already.
	format, arg, err := parseOutput(o.output, formatWide, formatJSON, formatYAML, formatName, formatJSONPath, formatCustomColumns)
	if err != nil {
		return err
	}
	if o.mode != "" && o.mode != string(v1alpha1.ModeMaintenance) && o.mode != string(v1alpha1.ModeDecommission) {
		return argsError{fmt.Sprintf("--mode %q: must be Maintenance or Decommission", o.mode)}
	}
	printer, err := objectPrinter(format, arg)
	if err != nil {
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
	plans, err := o.plan(ctx, s, nodes)
	if err != nil {
		return err
	}
	return o.write(plans, format, printer)
}

// plan reads what a drain of each node would meet and decides what it
// would do, node by node.
func (o *planOptions) plan(ctx context.Context, s *session, nodes []string) ([]NodePlan, error) {
	in, err := readShared(ctx, s)
	if err != nil {
		return nil, err
	}
	plans := make([]NodePlan, 0, len(nodes))
	for _, name := range nodes {
		r, err := readNode(ctx, s, name, o.policy, in)
		if err != nil {
			return nil, err
		}
		p, err := decideNode(r, in, o.planChoices, o.clock.Now())
		if err != nil {
			return nil, err
		}
		plans = append(plans, p)
	}
	return plans, nil
}
