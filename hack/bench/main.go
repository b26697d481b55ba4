// Command bench measures vacate's drain engine against `kubectl drain` and a
// tight client on fresh dev clusters (`make bench`, `make bench-scale`). It
// prints figures; it does not pass or fail. docs/performance.md defines
// every figure and records the results.
//
// Each run of each driver starts a fresh dev cluster from the same recipe
// (-nodes, -pods, -daemonsets), drains the first -drain nodes and measures
// from the audit log (requests per client, evictions), watches (PDB budgets,
// cordons, pods gone) and /proc (the drainer's CPU and peak RSS).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// adminUser is the harness's identity (the dev cluster's admin kubeconfig);
// its requests are never counted.
const adminUser = "vacate-admin"

// row is a set of drivers compared with each other.
type row struct {
	name    string
	drivers []driver
}

func main() {
	var (
		r          recipe
		runs       int
		rowsFlag   string
		firstN     int
		kcmQPS     int
		schedQPS   int
		kwokPar    int
		keep       bool
		tight      bool
		tightKC    string
		tightNodes string
		ctrlFlags  string
		scale      bool
		plotFrom   bool
		scalePods  string
		sc         scaleConfig
	)
	flag.IntVar(&r.nodes, "nodes", 20, "simulated nodes in the cluster")
	flag.IntVar(&r.pods, "pods", 480, "Deployment and StatefulSet pods (DaemonSet pods come on top)")
	flag.IntVar(&r.daemonSets, "daemonsets", 1, "DaemonSets (one pod per node each)")
	flag.IntVar(&r.perDeploy, "pods-per-deployment", 45, "pods per Deployment; each Deployment has a PDB")
	flag.StringVar(&r.pdbMaxUnav, "pdb-max-unavailable", "10%", "maxUnavailable of every Deployment's PDB")
	flag.IntVar(&r.stsSize, "statefulset-size", 30, "pods per StatefulSet at most (StatefulSets take 1/16 of -pods)")
	flag.IntVar(&r.podsPerNode, "node-pods", 110, "pod capacity of each node")
	flag.StringVar(&r.drain, "drain", "10", "nodes to drain, a count or a percentage of -nodes")
	flag.StringVar(&r.maxParallel, "max-parallel", "", "maxParallelNodes of vacate's policy in the parallel row (default: the drained count)")
	flag.IntVar(&runs, "runs", 3, "runs of each driver, each on a fresh cluster")
	flag.StringVar(&rowsFlag, "rows", "engine,parallel,tight,first", "rows to run: engine, parallel, tight, first (comma separated), or driver names")
	flag.IntVar(&firstN, "first-drains", 20, "single-node drains in the first-eviction row")
	flag.IntVar(&kcmQPS, "kcm-qps", 0, "kube-controller-manager's --kube-api-qps (burst twice that); 0 keeps its default (20), which paces ReplicaSets' pod creation")
	flag.IntVar(&schedQPS, "scheduler-qps", 0, "kube-scheduler's --kube-api-qps (burst twice that); 0 keeps its default (50), which binds at most 50 pods a second")
	flag.IntVar(&kwokPar, "kwok-parallelism", 32, "pods and nodes kwok handles at once (stages, leases); 0 keeps kwok's default (4), one simulated kubelet for every node, which starts and stops the pods of all nodes four at a time: a drain of ten nodes at once then waits on it (docs/performance.md), and thousands of pods go Running at a few a second")
	flag.StringVar(&ctrlFlags, "controller-flags", "", "more vacate-controller flags, space separated (for example --pprof-bind-address 127.0.0.1:6060 to take profiles during a run)")
	flag.BoolVar(&keep, "keep", false, "keep every run's cluster directory (logs, audit log) for a look afterwards")
	flag.BoolVar(&scale, "scale", false, "scale mode: one cluster of -nodes nodes grown through -scale-pods; at each size vacate-controller is measured idle and drains -drain fresh nodes, and at the last size N kubectl drain at once and the tight client drain fresh nodes of their own (no -runs, -rows)")
	flag.StringVar(&scalePods, "scale-pods", "1000,10000,30000", "scale mode: Deployment and StatefulSet pods to grow the cluster to, in order")
	flag.DurationVar(&sc.settle, "idle-settle", 30*time.Second, "scale mode: wait after vacate-controller's caches synced before its idle window")
	flag.DurationVar(&sc.window, "idle-window", time.Minute, "scale mode: how long vacate-controller's idle CPU is measured over")
	flag.BoolVar(&sc.compare, "scale-compare", true, "scale mode: run N kubectl drain at once and the tight client at the last size")
	flag.BoolVar(&plotFrom, "plot-only", false, "scale mode: run nothing; read -scale-results, print its report and draw -plot")
	flag.StringVar(&sc.results, "scale-results", "", "scale mode: write the figures as JSON to this file")
	flag.StringVar(&sc.plot, "plot", "", "scale mode: draw RSS and CPU per eviction against cluster pods into this PNG")
	flag.StringVar(&sc.before, "plot-before", "", "scale mode: an earlier run's -scale-results, drawn dashed on the plot")
	flag.StringVar(&sc.label, "plot-label", "", "scale mode: this run's name in the plot's legend (with -plot-before)")
	flag.StringVar(&sc.beforeL, "plot-before-label", "before", "scale mode: the earlier run's name in the plot's legend")
	flag.BoolVar(&tight, "tight-client", false, "internal: run as the tight client")
	flag.StringVar(&tightKC, "tight-kubeconfig", "", "internal: the tight client's kubeconfig")
	flag.StringVar(&tightNodes, "tight-nodes", "", "internal: the nodes the tight client drains")
	flag.Parse()
	// The bench reads the cluster through controller-runtime's client; it
	// has nothing to log, and would warn that no logger was set.
	ctrllog.SetLogger(logr.Discard())

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if tight {
		if err := tightDrain(ctx, tightKC, strings.Split(tightNodes, ",")); err != nil {
			fail(err)
		}
		return
	}
	r.ctrlFlags = strings.Fields(ctrlFlags)
	drained, err := r.drainCount()
	if err != nil {
		fail(fmt.Errorf("-drain %w", err))
	}
	rows, err := selectRows(allRows(drained, firstN), rowsFlag)
	if err != nil {
		fail(err)
	}
	if sc.sizes, err = parseSizes(scalePods); err != nil {
		fail(fmt.Errorf("-scale-pods %w", err))
	}
	if plotFrom {
		if err := plotOnly(os.Stdout, sc); err != nil {
			fail(err)
		}
		return
	}
	bins, err := build()
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(filepath.Dir(bins.controller))
	b := &bench{out: os.Stdout, r: r, runs: runs, bins: bins, kcmQPS: kcmQPS, schedQPS: schedQPS, kwokPar: kwokPar, keep: keep}
	if scale {
		err = b.runScale(ctx, sc)
	} else {
		err = b.run(ctx, rows)
	}
	if err != nil {
		_ = os.RemoveAll(filepath.Dir(bins.controller))
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

// allRows are the rows of docs/performance.md.
func allRows(drained, firstN int) []row {
	perNode := make([][]string, drained)
	zero := time.Duration(0)
	return []row{
		{"engine", []driver{
			{name: vacateSerial, user: controllerUser, policy: policyWith(one, nil), drain: drainWithVacate},
			{name: kubectlSerial, user: kubectlUser, drain: kubectlNodes(perNode, true)},
		}},
		{"parallel", []driver{
			{name: vacateParallel, user: controllerUser, policy: policyWith(allTargets, nil), drain: drainWithVacate},
			{name: kubectlOne, user: kubectlUser, drain: kubectlNodes(nil, true)},
			{name: kubectlMany, user: kubectlUser, drain: kubectlNodes(perNode, false)},
		}},
		{"tight", []driver{
			{name: tightClient, user: tightUser, drain: drainTight},
			// vacate without the batch window, which the tight client does
			// not have: the same recipe, what is left between them.
			{name: vacateNoBatch, user: controllerUser, policy: policyWith(allTargets, &zero), drain: drainWithVacate},
		}},
		{"first", []driver{
			{name: firstDefault, user: controllerUser, policy: policyWith(one, nil), drain: firstEvictions(firstN), first: true},
			{name: firstZero, user: controllerUser, policy: policyWith(one, &zero), drain: firstEvictions(firstN), first: true},
		}},
	}
}

// kubectlNodes runs kubectl over the targets: one process per node when
// perNode is set (its length is the target count), else one process for all.
func kubectlNodes(perNode [][]string, sequential bool) func(context.Context, *env) (usage, error) {
	return func(ctx context.Context, e *env) (usage, error) {
		groups := [][]string{e.targets}
		if perNode != nil {
			groups = make([][]string, len(e.targets))
			for i, n := range e.targets {
				groups[i] = []string{n}
			}
		}
		return kubectlDrain(groups, sequential)(ctx, e)
	}
}

// selectRows keeps the rows named in sel, or single drivers by name.
func selectRows(all []row, sel string) ([]row, error) {
	var out []row
	for _, name := range strings.Split(sel, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, r := range all {
			if r.name == name {
				out, found = append(out, r), true
				break
			}
			for _, d := range r.drivers {
				if d.name == name {
					out, found = append(out, row{name: r.name, drivers: []driver{d}}), true
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("-rows: no row or driver %q", name)
		}
	}
	return out, nil
}

// build compiles vacate-controller and finds kubectl and this program.
func build() (binaries, error) {
	var b binaries
	dir, err := os.MkdirTemp("", "vacate-bench-bin-")
	if err != nil {
		return b, err
	}
	b.controller = filepath.Join(dir, "vacate-controller")
	if out, err := exec.Command("go", "build", "-o", b.controller, "./cmd/vacate-controller").CombinedOutput(); err != nil {
		return b, fmt.Errorf("building vacate-controller: %w\n%s", err, out)
	}
	b.self, err = os.Executable()
	if err != nil {
		return b, fmt.Errorf("finding this program: %w", err)
	}
	return b, nil
}

// bench runs rows and prints what it measured.
type bench struct {
	out      io.Writer
	r        recipe
	runs     int
	bins     binaries
	kcmQPS   int
	schedQPS int
	kwokPar  int
	keep     bool
}

func (b *bench) run(ctx context.Context, rows []row) error {
	fmt.Fprintf(b.out, "recipe: %s\nvacate-controller flags: %s\n", b.r, strings.Join(controllerFlags("<its own user>", b.r.ctrlFlags), " "))
	fmt.Fprintf(b.out, "runs per driver: %d, each on a fresh dev cluster\n\n", b.runs)
	var results []driverResult
	for _, rw := range rows {
		for _, d := range rw.drivers {
			dr := driverResult{row: rw.name, driver: d}
			for i := 0; i < b.runs; i++ {
				fmt.Fprintf(b.out, "[%s] run %d/%d\n", d.name, i+1, b.runs)
				f, err := b.runOnce(ctx, d)
				if err != nil {
					if errors.Is(err, context.Canceled) {
						return err
					}
					fmt.Fprintf(b.out, "[%s] run %d failed: %v\n", d.name, i+1, err)
					continue
				}
				fmt.Fprintf(b.out, "[%s] %s\n", d.name, f.summary())
				dr.runs = append(dr.runs, f)
			}
			results = append(results, dr)
		}
	}
	fmt.Fprintln(b.out)
	report(b.out, results)
	checkTargets(b.out, results)
	return nil
}
