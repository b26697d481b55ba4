package cli

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/progress"
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
	in, err := gather(ctx, sess, nd)
	if err != nil {
		return err
	}
	in.Now = clk.Now()
	e := explain.Explain(in)
	out := s.Out
	fmt.Fprintln(out, e.State)
	if len(e.Findings) == 0 {
		switch nd.Status.Phase {
		case v1alpha1.PhaseDrained:
			fmt.Fprintln(out, "Nothing holds it: the node is drained.")
		default:
			fmt.Fprintln(out, "Nothing holds it up now; evictions are in progress. Follow with 'vacate status --watch'.")
		}
		return nil
	}
	for i, f := range e.Findings {
		since := ""
		if !f.Since.IsZero() {
			since = " (for " + progress.Duration(in.Now.Sub(f.Since)) + ")"
		}
		fmt.Fprintf(out, "\n%d. %s%s\n   why:  %s\n", i+1, f.Subject, since, f.Cause)
		if f.Fix != "" {
			fmt.Fprintf(out, "   do:   %s\n", f.Fix)
		}
	}
	return nil
}

// gather reads the blocked pods, the PDBs that hold them and the pods those
// PDBs select. It only reads.
func gather(ctx context.Context, s *session, nd *v1alpha1.NodeDrain) (explain.Input, error) {
	in := explain.Input{Drain: nd, Pods: map[string]*corev1.Pod{}, PDBs: map[string]*policyv1.PodDisruptionBudget{}, PDBPods: map[string][]*corev1.Pod{}}
	for _, b := range nd.Status.Blockers {
		ns, name, _ := strings.Cut(b.Pod, "/")
		p, err := s.clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			in.Pods[b.Pod] = p
		case !apierrors.IsNotFound(err):
			return in, s.explain(err, "reading pod "+b.Pod)
		}
		kind, holders, _ := strings.Cut(b.Holder, " ")
		if kind != "PodDisruptionBudget" {
			continue
		}
		for _, key := range strings.Split(holders, ", ") {
			if _, done := in.PDBs[key]; done {
				continue
			}
			if err := readPDB(ctx, s, key, &in); err != nil {
				return in, err
			}
		}
	}
	return in, nil
}

func readPDB(ctx context.Context, s *session, key string, in *explain.Input) error {
	ns, name, _ := strings.Cut(key, "/")
	pdb, err := s.clientset.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		in.PDBs[key] = nil
		return nil
	}
	if err != nil {
		return s.explain(err, "reading PodDisruptionBudget "+key)
	}
	in.PDBs[key] = pdb
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return fmt.Errorf("PodDisruptionBudget %s has an invalid selector: %w", key, err)
	}
	pods, err := s.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return s.explain(err, "listing the pods of PodDisruptionBudget "+key)
	}
	for i := range pods.Items {
		in.PDBPods[key] = append(in.PDBPods[key], &pods.Items[i])
	}
	return nil
}
