package cli

import (
	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/internal/demo"
)

func newDemoCommand(s Streams) *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo on a throwaway local cluster",
		Long: `Starts a dev cluster named "` + demo.ClusterName + `", creates simulated nodes in two
zones and a small workload (a Deployment with a PDB, a StatefulSet, a
DaemonSet), shows what runs where, and stops the cluster.`,
		Example: `  vacate demo
  # leave the cluster running to explore it with kubectl
  vacate demo --keep`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), s.Out, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "leave the cluster running and print its kubeconfig")
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 5, "number of simulated nodes")
	return cmd
}
