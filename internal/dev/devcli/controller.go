package devcli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/operator"
)

func newDevControllerCommand(s Streams) *cobra.Command {
	var logFile string
	name := new(string)
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the vacate controller against a dev cluster, in the foreground",
		Long: `Installs vacate's CRDs in the dev cluster and runs the vacate controller
(leader election on, no metrics or probe listeners) until Ctrl-C, so the CLI
has something to talk to. 'vacate-dev down' stops it too.`,
		Example: `  vacate-dev up
  vacate-dev controller &
  eval "$(vacate-dev env)"
  vacate drain node-0 --wait`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := readRunningState(*name)
			if err != nil {
				return err
			}
			var out io.Writer = s.Err
			if logFile != "" {
				f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return fmt.Errorf("opening --log-file: %w", err)
				}
				defer f.Close()
				out = f
			}
			logger := zap.New(zap.WriteTo(out))
			ctrl.SetLogger(logger)
			klog.SetLogger(logger)
			cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
			if err != nil {
				return fmt.Errorf("reading the dev cluster's kubeconfig: %w", err)
			}
			if err := devcluster.InstallCRDs(cmd.Context(), cfg); err != nil {
				return err
			}
			if err := devcluster.InstallControllerIdentity(cmd.Context(), cfg); err != nil {
				return err
			}
			opts := operator.DefaultOptions()
			opts.MetricsAddr, opts.ProbeAddr, opts.SeveralInProcess = "0", "0", true
			opts.Controllers.AllowLoopbackHooks = true // the dev cluster's pods live on 127.0.0.0/8
			mgr, err := operator.New(cmd.Context(), cfg, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Err, "vacate controller running against dev cluster %q; Ctrl-C stops it\n", *name)
			return mgr.Start(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&logFile, "log-file", "", "append the controller's log to this file instead of stderr")
	nameFlag(cmd, name)
	return cmd
}
