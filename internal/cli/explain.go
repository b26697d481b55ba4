package cli

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/explain"
)

func newExplainCommand(flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain NODE",
		Short: "Say why a drain is stuck, and what to do about it",
		Long: `For the drain of a node, lists everything that holds it up, with the cause
in the cluster's terms and what a person can do: for a PodDisruptionBudget,
how many of its pods are healthy, which are not and why, and how to relax it;
for a pod without a controller or with local data, the choices the policy
offers; for the drain itself, a missing policy or node, or a timeout.`,
		Example: `  vacate explain node-1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return argsError{fmt.Sprintf("explain takes one node, got %d; see 'vacate explain --help'", len(args))}
			}
			return nil
		},
		ValidArgsFunction: completeNodes(flags),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExplain(cmd.Context(), flags, s, clk, args[0])
		},
	}
	return cmd
}

func runExplain(ctx context.Context, flags *genericclioptions.ConfigFlags, s Streams, clk clock.WithTicker, node string) error {
	sess, err := connect(ctx, flags)
	if err != nil {
		return err
	}
	nd := &v1alpha1.NodeDrain{}
	err = sess.client.Get(ctx, types.NamespacedName{Name: node}, nd)
	if apierrors.IsNotFound(err) {
		if _, nerr := sess.node(ctx, node); nerr != nil {
			return nerr
		}
		return fmt.Errorf("node %s has no drain to explain; 'vacate plan %s' shows what a drain would meet", node, node)
	}
	if err != nil {
		return sess.explain(err, "reading NodeDrain "+node)
	}
	in, err := explain.Read(ctx, sess.clientset, nd)
	if err != nil {
		return sess.explain(err, "reading what holds the drain of "+node)
	}
	in.Evacuations = nodeEvacuations(ctx, sess, node)
	in.Now = clk.Now()
	return explain.Explain(in).Write(s.Out, in.Now)
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
		if ev.Spec.NodeName == node {
			out = append(out, ev)
		}
	}
	return out
}
