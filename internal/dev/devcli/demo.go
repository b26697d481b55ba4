package devcli

import (
	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/demo"
)

func newDemoCommand(s Streams) *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo on a throwaway local cluster",
		Long: `Starts a dev cluster named "` + demo.ClusterName + `" with the vacate controller in process,
creates 8 simulated nodes in two zones and a realistic mix (Deployments with
PDBs, a StatefulSet with a tight PDB, a DaemonSet, a Job), then drains three
nodes with the live progress view: one is held by the tight PDB, explained,
and released by relaxing the PDB. Ends with a summary table and the path of a
JSON report, and stops the cluster (--keep leaves it, with a controller).`,
		Example: `  vacate-dev demo
  # leave the cluster running to explore it with kubectl
  vacate-dev demo --keep`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), s.Out, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "leave the cluster running and print its kubeconfig")
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 8, "number of simulated nodes (at least 5)")
	return cmd
}
