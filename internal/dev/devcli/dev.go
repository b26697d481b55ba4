// Package devcli is the development command vacate-dev: the local dev
// cluster (up, down, status, env, build), the vacate controller run against
// it, the demo and the reference broker. None of it ships in the vacate
// that users install (internal/cli); `vacate dev ...` and `vacate demo` run
// vacate-dev when it is found next to vacate or on PATH.
package devcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// Streams are the command's input and outputs, injected for tests.
type Streams = cli.Streams

// Main runs vacate-dev and returns its exit code (cli's codes). Ctrl-C
// cancels the context, so commands stop what they started before returning.
func Main(args []string, s Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Execute(ctx, NewRootCommand(s), args, s)
}

// NewRootCommand builds the vacate-dev command tree.
func NewRootCommand(s Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   cli.DevProgram,
		Short: "Development tools of vacate: a local cluster, the controller on it, the demo",
		Long: `A real control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) built from source at pinned versions, plus kwok to simulate
nodes and pods. Everything listens on loopback; pods get IPs in 127.0.0.0/8.
Several clusters can run side by side under different --name values.

These are tools for working on vacate, run from a vacate checkout; the vacate
that users install leaves them out. 'vacate dev ...' and 'vacate demo' run
this program when it is next to vacate (make build) or on PATH.`,
		Example: `  vacate-dev up
  eval "$(vacate-dev env)"
  kubectl get nodes
  vacate-dev status
  vacate-dev down

  # The demo, on a throwaway cluster
  vacate-dev demo`,
	}
	cli.SetUp(root, s)
	root.AddCommand(
		newDevUpCommand(s),
		newDevDownCommand(s),
		newDevStatusCommand(s),
		newDevEnvCommand(s),
		newDevBuildCommand(s),
		newDevControllerCommand(s),
		newDevBrokerCommand(),
		newDemoCommand(s),
	)
	return root
}

// nameFlag adds --name, the dev cluster's name, to cmd.
func nameFlag(cmd *cobra.Command, name *string) {
	cmd.Flags().StringVar(name, "name", devcluster.DefaultName, "name of the dev cluster")
}

func newDevUpCommand(s Streams) *cobra.Command {
	var foreground, evictionRequests bool
	name := new(string)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a dev cluster and print its kubeconfig",
		Example: `  vacate-dev up
  export KUBECONFIG=$(vacate-dev env --path)
  kubectl get nodes

  # Keep it in the foreground; Ctrl-C stops it
  vacate-dev up --name scratch --foreground

  # Serve Kubernetes 1.37's EvictionRequest API (alpha, off by default)
  vacate-dev up --name er --eviction-request-api`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := devcluster.Up(ctx, devcluster.Options{Name: *name, Detach: !foreground, Out: s.Err, EvictionRequestAPI: evictionRequests})
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "dev cluster %q is up: API server %s%s\n", c.Name, c.Server, servesEvictionRequests(c.State))
			fmt.Fprintf(s.Out, "kubeconfig: %s\n", c.Kubeconfig)
			fmt.Fprintf(s.Out, "use it with:\n  export KUBECONFIG=%s\n", c.Kubeconfig)
			if !foreground {
				fmt.Fprintf(s.Out, "stop it with:\n  vacate-dev down --name %s\n", c.Name)
				return nil
			}
			fmt.Fprintln(s.Out, "running in the foreground; press Ctrl-C to stop")
			<-ctx.Done()
			fmt.Fprintln(s.Err, "stopping the dev cluster")
			c.Stop()
			return nil
		},
	}
	cmd.Flags().BoolVar(&foreground, "foreground", false, "stay in the foreground and stop the cluster on Ctrl-C")
	cmd.Flags().BoolVar(&evictionRequests, "eviction-request-api", false,
		"serve Kubernetes 1.37's EvictionRequest API ("+devcluster.EvictionRequestGroupVersion+", feature gate "+devcluster.EvictionRequestFeatureGate+")")
	nameFlag(cmd, name)
	return cmd
}

// servesEvictionRequests is what a cluster's line says of the EvictionRequest
// API: nothing when it is off, as it is by default.
func servesEvictionRequests(st devcluster.State) string {
	if !st.EvictionRequestAPI {
		return ""
	}
	return ", serving " + devcluster.EvictionRequestGroupVersion + " (feature gate " + devcluster.EvictionRequestFeatureGate + ")"
}

func newDevDownCommand(s Streams) *cobra.Command {
	name := new(string)
	cmd := &cobra.Command{
		Use:     "down",
		Short:   "Stop a dev cluster and every process it started",
		Example: "  vacate-dev down\n  vacate-dev down --name scratch",
		Args:    cli.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			dir, err := devcluster.ClusterDir(*name)
			if err != nil {
				return err
			}
			stopped, err := devcluster.Down(dir)
			if errors.Is(err, devcluster.ErrNotRunning) {
				fmt.Fprintf(s.Out, "dev cluster %q is not running\n", *name)
				return nil
			}
			for _, p := range stopped {
				fmt.Fprintf(s.Out, "stopped %s\n", p)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "dev cluster %q is down (logs kept in %s/logs)\n", *name, dir)
			return nil
		},
	}
	nameFlag(cmd, name)
	return cmd
}

func newDevStatusCommand(s Streams) *cobra.Command {
	name := new(string)
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the processes of a dev cluster and whether the API server is ready",
		Example: "  vacate-dev status\n  vacate-dev status --name scratch",
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := readRunningState(*name)
			if err != nil {
				return err
			}
			return printStatus(cmd.Context(), s.Out, st)
		},
	}
	nameFlag(cmd, name)
	return cmd
}

func newDevEnvCommand(s Streams) *cobra.Command {
	var pathOnly bool
	name := new(string)
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print the shell line that points kubectl at a dev cluster",
		Example: `  eval "$(vacate-dev env)"
  KUBECONFIG=$(vacate-dev env --path) kubectl get pods -A`,
		Args: cli.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			st, err := readRunningState(*name)
			if err != nil {
				return err
			}
			if pathOnly {
				fmt.Fprintln(s.Out, st.Kubeconfig)
				return nil
			}
			fmt.Fprintf(s.Out, "export KUBECONFIG=%s\n", st.Kubeconfig)
			return nil
		},
	}
	cmd.Flags().BoolVar(&pathOnly, "path", false, "print only the kubeconfig path")
	nameFlag(cmd, name)
	return cmd
}

func newDevBuildCommand(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "build",
		Short: "Build the pinned control-plane and kwok binaries (up does this when needed)",
		Long: fmt.Sprintf(`Builds etcd %s, Kubernetes %s (kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl) and kwok %s from source through the Go module proxy,
into the cache directory ($%s, default ~/.cache/vacate). Must run inside a
vacate checkout (or with $%s set to one). The first build takes a few
minutes; later calls find the cached binaries.

$%s=%s builds (and up runs) the oldest Kubernetes vacate supports
instead, %s with etcd %s.`,
			devcluster.EtcdVersion, devcluster.KubernetesVersion, devcluster.KwokVersion,
			devcluster.EnvCacheDir, devcluster.EnvSourceDir,
			devcluster.EnvKubernetesVersion, devcluster.OldestKubernetesMinor(),
			devcluster.ControlPlanes[0].Kubernetes, devcluster.ControlPlanes[0].Etcd),
		Example: "  vacate-dev build",
		Args:    cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bins, err := devcluster.EnsureBinaries(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			for _, n := range []string{devcluster.Etcd, devcluster.KubeAPIServer, devcluster.KubeControllerManager, devcluster.KubeScheduler, devcluster.Kubectl, devcluster.Kwok} {
				fmt.Fprintf(s.Out, "%-24s %s\n", n, bins[n])
			}
			return nil
		},
	}
}

func readRunningState(name string) (devcluster.State, error) {
	dir, err := devcluster.ClusterDir(name)
	if err != nil {
		return devcluster.State{}, err
	}
	st, err := devcluster.ReadState(dir)
	if errors.Is(err, devcluster.ErrNotRunning) || (err == nil && !st.Running()) {
		return st, fmt.Errorf("dev cluster %q is not running; start it with `vacate-dev up --name %s`", name, name)
	}
	return st, err
}

func printStatus(ctx context.Context, out io.Writer, st devcluster.State) error {
	fmt.Fprintf(out, "dev cluster %q, started %s, kubeconfig %s\n\n", st.Name, st.Started.Format(time.RFC3339), st.Kubeconfig)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tPID\tPORT\tPROCESS\tLOG")
	for _, c := range st.Components {
		state := "running"
		if !devcluster.ProcessAlive(c.PID, c.Binary) {
			state = "NOT RUNNING"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", c.Name, c.PID, c.Port, state, c.Log)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nAPI server %s: %s%s\n", st.Server, apiServerReadiness(ctx, st.Kubeconfig), servesEvictionRequests(st))
	return nil
}

func apiServerReadiness(ctx context.Context, kubeconfig string) string {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	cfg.Timeout = 3 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return "NOT READY (" + err.Error() + ")"
	}
	return "ready (" + string(body) + ")"
}
