package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/clock"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/leader"
)

type explainOptions struct {
	flags   *genericclioptions.ConfigFlags
	streams Streams
	clock   clock.WithTicker
	targets
	output string
}

func newExplainCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	o := &explainOptions{flags: flags, streams: s, clock: clk}
	cmd := &cobra.Command{
		Use:   "explain NODE... | -l SELECTOR",
		Short: "Say why a drain is stuck, and what to do about it",
		Long: `For the drain of a node, lists everything that holds it up, with the cause
in the cluster's terms and what a person can do: for a PodDisruptionBudget,
how many of its pods are healthy, which are not and why, and how to relax it;
for a pod without a controller or with local data, the choices the policy
offers; for the drain itself, a missing policy or node, or a timeout. With -l,
the drains of the nodes it selects. -o json|yaml|name|jsonpath=...|
custom-columns=... print each explanation as an object of kind
DrainExplanation (apiVersion cli.vacate.dev/v1alpha1, a document of this
command that no API server serves; metadata.name, node, state, findings:
subject, cause, fix, since); -o name names the NodeDrain explained.`,
		Example: `  vacate explain node-1

  # The drains of a pool, what holds each, for a script
  vacate explain -l pool=batch -o custom-columns=NODE:.metadata.name,STATE:.state`,
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), args)
		},
	}
	o.targets.addFlag(cmd.Flags(), "explain the drains of")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", outputUsage)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// explained is what -o prints of an explanation: the node and it.
type explained struct {
	Node string `json:"node"`
	explain.Explanation
}

// The kind of what explain -o prints: a document of the CLI, which no API
// server serves (it is not the NodeDrain it explains).
const (
	explanationAPIVersion = "cli.vacate.dev/v1alpha1"
	explanationKind       = "DrainExplanation"
)

// printExplanation prints the explanation of node's drain as an object of
// its own kind, named after the node; -o name names the NodeDrain it
// explains, which kubectl can read.
func printExplanation(printer printers.ResourcePrinter, format string, s Streams, node string, e explain.Explanation) error {
	if format == formatName {
		nd := &v1alpha1.NodeDrain{}
		nd.SetName(node)
		return printer.PrintObj(typed(nd), s.Out)
	}
	obj, err := asObject(explanationAPIVersion, explanationKind, explained{Node: node, Explanation: e})
	if err != nil {
		return err
	}
	obj.SetName(node)
	return printer.PrintObj(obj, s.Out)
}

func (o *explainOptions) run(ctx context.Context, args []string) error {
	if err := o.targets.check("explain", "the nodes whose drains to explain", args); err != nil {
		return err
	}
	format, arg, err := parseOutput(o.output, formatWide, formatJSON, formatYAML, formatName, formatJSONPath, formatCustomColumns)
	if err != nil {
		return err
	}
	printer, err := objectPrinter(format, arg)
	if err != nil {
		return err
	}
	sess, err := connect(ctx, o.flags)
	if err != nil {
		return err
	}
	nodes, err := sess.nodeNames(ctx, args, o.selector)
	if err != nil {
		return err
	}
	var missing []error
	shown := 0
	for _, node := range nodes {
		e, err := explainNode(ctx, sess, node, o.clock.Now())
		if err != nil {
			if o.selector != "" && isNoDrain(err) {
				continue // a selected node without a drain: nothing to say
			}
			if !isNoDrain(err) && !isUnknownNode(err) {
				return err
			}
			missing = append(missing, err)
			continue
		}
		if printer == nil {
			if shown > 0 {
				fmt.Fprintln(o.streams.Out)
			}
			if err := e.Write(o.streams.Out, o.clock.Now()); err != nil {
				return err
			}
		} else if err := printExplanation(printer, format, o.streams, node, e); err != nil {
			return err
		}
		shown++
	}
	if o.selector != "" && shown == 0 && len(missing) == 0 {
		fmt.Fprintf(o.streams.Out, "No drains of the nodes -l %s selects.\n", o.selector)
	}
	for i, err := range missing {
		if i < len(missing)-1 {
			fmt.Fprintf(o.streams.Err, "error: %v\n", err)
			continue
		}
		return err
	}
	return nil
}

// noDrainError: the node has no drain to explain.
type noDrainError struct{ node string }

func (e noDrainError) Error() string {
	return fmt.Sprintf("node %s has no drain to explain; 'vacate plan %s' shows what a drain would meet", e.node, e.node)
}

func isNoDrain(err error) bool {
	var e noDrainError
	return errors.As(err, &e)
}

func isUnknownNode(err error) bool {
	var e unknownNodeError
	return errors.As(err, &e)
}

// explainNode explains the drain of one node.
func explainNode(ctx context.Context, sess *session, node string, now time.Time) (explain.Explanation, error) {
	nd := &v1alpha1.NodeDrain{}
	err := sess.client.Get(ctx, types.NamespacedName{Name: node}, nd)
	if apierrors.IsNotFound(err) {
		if _, nerr := sess.node(ctx, node); nerr != nil {
			return explain.Explanation{}, nerr
		}
		return explain.Explanation{}, noDrainError{node}
	}
	if err != nil {
		return explain.Explanation{}, sess.explain(err, "reading NodeDrain "+node)
	}
	in, err := explain.Read(ctx, sess.clientset, nd)
	if err != nil {
		return explain.Explanation{}, sess.explain(err, "reading what holds the drain of "+node)
	}
	in.Evacuations = nodeEvacuations(ctx, sess, node)
	in.Now = now
	e := explain.Explain(in)
	e.EvictionRequests = leaderEvictionRequests(ctx, sess, now)
	return e, nil
}

// leaderEvictionRequests says how the leader drains pods that declare
// eviction responders (evictionRequestsLine); "" where the Lease cannot be
// read.
func leaderEvictionRequests(ctx context.Context, sess *session, now time.Time) string {
	cs, err := sess.controllers(ctx, now)
	if err != nil {
		return ""
	}
	return evictionRequestsLine(cs)
}

// evictionRequestsLine says how the leader of the controllers drains pods
// that declare eviction responders, where it uses Kubernetes'
// EvictionRequest API or was told not to; "" where the API is not served,
// no one leads, or the Lease does not say.
func evictionRequestsLine(cs []controllerLease) string {
	for _, c := range cs {
		if !c.Held {
			continue
		}
		switch c.EvictionRequests {
		case leader.EvictionRequestsCoordinating:
			return "asked for with EvictionRequests, which vacate-controller coordinates (--eviction-requests)"
		case leader.EvictionRequestsRequesting:
			return "asked for with EvictionRequests, which another coordinator runs (--eviction-requests=request-only)"
		case leader.EvictionRequestsOff:
			return "evicted by the drain, as every pod (--eviction-requests=off)"
		}
	}
	return ""
}

// nodeEvacuations are the Evacuations of node, or nil when they cannot be
// read (the warnings they feed are then left out, not the command).
func nodeEvacuations(ctx context.Context, sess *session, node string) []v1alpha1.Evacuation {
	list := &v1alpha1.EvacuationList{}
	if err := sess.client.List(ctx, list); err != nil {
		return nil
	}
	var out []v1alpha1.Evacuation
	for _, ev := range list.Items {
		if ev.Spec.NodeName == node && !ev.ForEviction() { // one pod's Eviction's is not the drain's
			out = append(out, ev)
		}
	}
	return out
}
