// Command bench-endpoints measures the requests a drain drops (`make
// bench-endpoints`): on one dev cluster, for each scenario and run, fresh
// nodes run a Deployment of real HTTP servers (stopped at SIGTERM, or after
// a preStop sleep) behind a Service, a load balancer stand-in sends steady
// traffic to the endpoints EndpointSlices show ready (with kube-proxy's
// lag), and some of the nodes are drained: with `kubectl drain`, with
// vacate without and with the readiness gate vacate.dev/serving, and with
// a preStop sleep as the usual workaround. It prints failed requests and
// drain times; it does not pass or fail. docs/performance.md records them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/servedrain"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
	"github.com/vacate-dev/vacate/internal/operator"
)

func main() {
	traffic.MaybeServe()           // the pods' server processes are this program
	ctrl.SetLogger(logr.Discard()) // the in-process controller's logs would drown the figures
	var (
		runs  int
		setup servedrain.Setup
		pre   time.Duration
		keep  bool
		only  string
	)
	flag.IntVar(&runs, "runs", 3, "runs of each scenario")
	flag.IntVar(&setup.Nodes, "nodes", 4, "nodes per run")
	flag.IntVar(&setup.Drain, "drain", 2, "nodes drained per run")
	replicas := flag.Int("replicas", 8, "replicas of the Deployment, spread over the nodes")
	flag.Float64Var(&setup.Rate, "rate", 200, "requests per second")
	flag.DurationVar(&setup.Lag, "lag", time.Second, "how long the load balancer stand-in takes to apply an EndpointSlice change")
	flag.DurationVar(&setup.Settle, "settle", 2*time.Second, "the DrainPolicy's endpoints.settleTime")
	flag.DurationVar(&pre, "prestop", 2*time.Second, "the preStop sleep of the workaround scenarios (longer than -lag to be of use)")
	flag.BoolVar(&keep, "keep", false, "keep the cluster's directory (logs)")
	flag.StringVar(&only, "scenarios", "", "run only the scenarios whose name contains this text, such as \"gate\"")
	flag.Parse()
	setup.Replicas = int32(*replicas)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, os.Stdout, setup, runs, pre, keep, only); err != nil {
		fmt.Fprintf(os.Stderr, "bench-endpoints: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, s servedrain.Setup, runs int, pre time.Duration, keep bool, only string) error {
	dir, err := os.MkdirTemp("", "vacate-bench-endpoints-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	c, err := devcluster.Up(ctx, devcluster.Options{Name: "bench-endpoints", Dir: dir})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
		return err
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return err
	}
	if s.Client, err = client.New(c.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	network, err := traffic.NewNetwork("vacate-bench-ep", netip.MustParsePrefix("10.221.0.0/16"))
	if err != nil {
		return err
	}
	defer network.Close()
	opts := operator.InProcessOptions()
	stop, err := operator.Start(ctx, c.RESTConfig, opts)
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	s.Cluster, s.Network, s.Kubectl, s.Out = c, network, c.Binaries[devcluster.Kubectl], out

	scenarios := []servedrain.Scenario{
		{Drainer: servedrain.Kubectl},
		{Drainer: servedrain.Vacate},
		{Drainer: servedrain.Vacate, Gate: true},
		{Drainer: servedrain.Vacate, Gate: true, Surge: true},
		{Drainer: servedrain.Kubectl, PreStop: pre},
		{Drainer: servedrain.Vacate, PreStop: pre},
	}
	scenarios = slices.DeleteFunc(scenarios, func(sc servedrain.Scenario) bool { return !strings.Contains(sc.String(), only) })
	fmt.Fprintf(out, "recipe: %d nodes per run, %d drained at once, Deployment of %d servers (PDB maxUnavailable 1), %.0f requests/s, balancer lag %s, settleTime %s; %d run(s) each\n\n",
		s.Nodes, s.Drain, s.Replicas, s.Rate, s.Lag, s.Settle, runs)
	results := map[servedrain.Scenario][]servedrain.Result{}
	n := 0
	for i := 0; i < runs; i++ {
		for _, sc := range scenarios {
			res, err := servedrain.Run(ctx, s, sc, n)
			n++
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				fmt.Fprintf(out, "[%s] run %d failed: %v\n", sc, i+1, err)
				continue
			}
			fmt.Fprintf(out, "[%s] run %d: %d of %d requests failed (%d with no backend), drain %s, %d pods evicted\n",
				sc, i+1, res.Requests.Lost(), res.Requests.Sent, res.Requests.NoBackend, res.DrainTime.Round(10*time.Millisecond), res.Evicted)
			if len(res.Requests.Errors) > 0 {
				fmt.Fprintf(out, "[%s] run %d: first failures: %s\n", sc, i+1, strings.Join(res.Requests.Errors, "; "))
			}
			results[sc] = append(results[sc], res)
		}
	}
	fmt.Fprintln(out)
	report(out, scenarios, results)
	if keep {
		fmt.Fprintf(out, "cluster directory kept: %s\n", filepath.Clean(dir))
	}
	return nil
}

// report prints a row per scenario: medians over its runs, and the
// replacement pods' time to Ready.
func report(out io.Writer, scenarios []servedrain.Scenario, results map[servedrain.Scenario][]servedrain.Result) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\truns\tfailed requests (each run)\tdrain time p50\treplacement pods: created → Ready p50 / max")
	for _, sc := range scenarios {
		rs := results[sc]
		if len(rs) == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\n", sc)
			continue
		}
		var lost []string
		var times, ready []time.Duration
		for _, r := range rs {
			lost = append(lost, fmt.Sprintf("%d/%d", r.Requests.Lost(), r.Requests.Sent))
			times = append(times, r.DrainTime)
			ready = append(ready, r.ReadyAfter...)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", sc, len(rs), strings.Join(lost, ", "), median(times).Round(10*time.Millisecond), readiness(ready))
	}
	_ = tw.Flush()
}

func readiness(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	slices.Sort(ds)
	return fmt.Sprintf("%s / %s (%d pods)", median(ds).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
