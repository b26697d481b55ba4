// Command bench compares draining with vacate against `kubectl drain` on the
// dev cluster (`make bench`). It prints figures; it does not pass or fail.
//
// Setup, identical for both runs, each on a fresh cluster: 20 simulated
// nodes, 10 Deployments of 45 pods each behind a PDB of maxUnavailable 10%,
// a StatefulSet of 30 and a DaemonSet (25 pods per node). Then 10 nodes are
// drained: by vacate all requested at once (one NodeDrain each, under a
// DrainPolicy default of maxParallelNodes 10, vacate-controller as its own
// process), and by kubectl one node after another, as a person would.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/devcluster"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/testutil"
)

const (
	nodes       = 20
	drainNodes  = 10
	deployments = 10
	perDeploy   = 45
	stsPods     = 30
)

// result is what one run measured.
type result struct {
	name              string
	wall              time.Duration
	evictions         int // accepted evictions
	podsEmptied       int // non-DaemonSet pods that were on the drained nodes
	apiRequests       float64
	firstEviction     time.Duration
	pdbViolations     int
	controllerPeakRSS int64 // kB; 0 when not measured
}

func main() {
	out := os.Stdout
	flag.Parse()
	ctx := context.Background()
	bin := filepath.Join(os.TempDir(), "vacate-bench-controller")
	if b, err := exec.Command("go", "build", "-o", bin, "./cmd/vacate-controller").CombinedOutput(); err != nil {
		fail(fmt.Errorf("building vacate-controller: %v\n%s", err, b))
	}
	fmt.Fprintf(out, "setup per run: %d nodes, %d Deployments x %d pods (PDB maxUnavailable 10%%), StatefulSet %d, DaemonSet; drain %d nodes\n\n",
		nodes, deployments, perDeploy, stsPods, drainNodes)
	v, err := run(ctx, out, "vacate", func(c *devcluster.Cluster, targets []string) (int64, error) {
		return drainWithVacate(ctx, c, bin, targets)
	})
	if err != nil {
		fail(err)
	}
	k, err := run(ctx, out, "kubectl drain", func(c *devcluster.Cluster, targets []string) (int64, error) {
		return 0, drainWithKubectl(ctx, c, targets)
	})
	if err != nil {
		fail(err)
	}
	report(out, v, k)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

// run sets up a fresh cluster, drains with drainFn and measures.
func run(ctx context.Context, out io.Writer, name string, drainFn func(*devcluster.Cluster, []string) (int64, error)) (result, error) {
	r := result{name: name}
	dir, err := os.MkdirTemp("", "vacate-bench-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(out, "[%s] starting a fresh dev cluster and the workload\n", name)
	c, err := devcluster.Up(ctx, devcluster.Options{Name: "bench", Dir: dir})
	if err != nil {
		return r, err
	}
	defer c.Stop()
	if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
		return r, err
	}
	names, err := setup(ctx, c)
	if err != nil {
		return r, err
	}
	targets := names[:drainNodes]
	r.podsEmptied, err = podsToEmpty(ctx, c, targets)
	if err != nil {
		return r, err
	}
	stopGuard := watchPDBs(ctx, c, &r.pdbViolations)
	before, err := apiRequests(ctx, c)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(out, "[%s] draining %d nodes (%d pods to move)\n", name, len(targets), r.podsEmptied)
	start := time.Now()
	rss, err := drainFn(c, targets)
	if err != nil {
		return r, err
	}
	r.wall = time.Since(start)
	r.controllerPeakRSS = rss
	stopGuard()
	after, err := apiRequests(ctx, c)
	if err != nil {
		return r, err
	}
	r.apiRequests = after - before
	r.evictions, r.firstEviction, err = evictionsFromAudit(c.AuditLog, start)
	fmt.Fprintf(out, "[%s] done in %s\n\n", name, r.wall.Round(100*time.Millisecond))
	return r, err
}

func setup(ctx context.Context, c *devcluster.Cluster) ([]string, error) {
	names, err := devcluster.CreateNodes(ctx, c.Client, devcluster.NodeSet{Prefix: "node", Count: nodes, Zones: []string{"zone-a", "zone-b", "zone-c"}})
	if err != nil {
		return nil, err
	}
	if err := devcluster.WaitForNodesReady(ctx, c.Client, names, time.Minute); err != nil {
		return nil, err
	}
	ns := "bench"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, ns, time.Minute); err != nil {
		return nil, err
	}
	for i := 0; i < deployments; i++ {
		app := fmt.Sprintf("web-%d", i)
		if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, devcluster.Deployment(ns, app, perDeploy), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, app, app, "", "10%"), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, devcluster.HeadlessService(ns, "db"), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, devcluster.StatefulSet(ns, "db", stsPods), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, devcluster.DaemonSet(ns, "agent"), metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	want := deployments*perDeploy + stsPods + nodes
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), want, 5*time.Minute); err != nil {
		return nil, err
	}
	for i := 0; i < deployments; i++ {
		if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, fmt.Sprintf("web-%d", i), perDeploy, time.Minute); err != nil {
			return nil, err
		}
	}
	sort.Strings(names)
	return names, nil
}

func podsToEmpty(ctx context.Context, c *devcluster.Cluster, targets []string) (int, error) {
	n := 0
	for _, node := range targets {
		list, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return 0, err
		}
		for _, p := range list.Items {
			if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "DaemonSet" {
				n++
			}
		}
	}
	return n, nil
}

// drainWithVacate runs vacate-controller as its own process, creates one
// NodeDrain per target at once, waits until all are Drained, and returns the
// controller's peak RSS in kB.
func drainWithVacate(ctx context.Context, c *devcluster.Cluster, bin string, targets []string) (int64, error) {
	cmd := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	logf, err := os.Create(filepath.Join(c.Dir, "logs", "vacate-controller.log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	scheme, err := operator.Scheme()
	if err != nil {
		return 0, err
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		return 0, err
	}
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultPolicyName},
		Spec: v1alpha1.DrainPolicySpec{Concurrency: v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(drainNodes))}}}
	if err := cl.Create(ctx, dp); err != nil {
		return 0, err
	}
	for _, n := range targets {
		nd := testutil.NodeDrain(n, "", "bench")
		if err := cl.Create(ctx, nd); err != nil {
			return 0, err
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range targets {
			nd := &v1alpha1.NodeDrain{}
			if err := cl.Get(ctx, types.NamespacedName{Name: n}, nd); err != nil || nd.Status.Phase != v1alpha1.PhaseDrained {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("waiting for the drains: %w", err)
	}
	return peakRSS(cmd.Process.Pid), nil
}

func drainWithKubectl(ctx context.Context, c *devcluster.Cluster, targets []string) error {
	for _, n := range targets {
		cmd := exec.CommandContext(ctx, c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig, "drain", n,
			"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10m")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl drain %s: %v\n%s", n, err, b)
		}
	}
	return nil
}

// peakRSS reads VmHWM (kB) of a live process.
func peakRSS(pid int) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "VmHWM:") {
			fields := strings.Fields(sc.Text())
			v, _ := strconv.ParseInt(fields[1], 10, 64)
			return v
		}
	}
	return 0
}

// apiRequests sums the API server's apiserver_request_total counter.
func apiRequests(ctx context.Context, c *devcluster.Cluster) (float64, error) {
	body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading API server metrics: %w", err)
	}
	var total float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total, nil
}

// evictionsFromAudit counts accepted evictions and the delay from start to
// the first.
func evictionsFromAudit(path string, start time.Time) (int, time.Duration, error) {
	events, err := devcluster.ReadAudit(path)
	if err != nil {
		return 0, 0, err
	}
	n := 0
	var first time.Time
	for _, e := range events {
		if e.Verb == "create" && e.ObjectRef != nil && e.ObjectRef.Subresource == "eviction" && e.Succeeded() {
			n++
			if first.IsZero() || e.Received.Before(first) {
				first = e.Received
			}
		}
	}
	if first.IsZero() {
		return n, 0, nil
	}
	return n, first.Sub(start), nil
}

// watchPDBs counts moments a PDB's healthy count falls below its desired count.
func watchPDBs(ctx context.Context, c *devcluster.Cluster, violations *int) func() {
	ctx, cancel := context.WithCancel(ctx)
	w, err := c.Client.PolicyV1().PodDisruptionBudgets("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*policyv1.PodDisruptionBudget); ok && p.Status.ExpectedPods > 0 && p.Status.CurrentHealthy < p.Status.DesiredHealthy {
				*violations++
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func report(out io.Writer, v, k result) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVACATE\tKUBECTL DRAIN\tVACATE/KUBECTL")
	row := func(name string, a, b float64, unit string) {
		ratio := "-"
		if b != 0 {
			ratio = fmt.Sprintf("%.2f", a/b)
		}
		fmt.Fprintf(tw, "%s\t%.2f %s\t%.2f %s\t%s\n", name, a, unit, b, unit, ratio)
	}
	row("wall time", v.wall.Seconds(), k.wall.Seconds(), "s")
	row("evictions per second", float64(v.evictions)/v.wall.Seconds(), float64(k.evictions)/k.wall.Seconds(), "/s")
	row("API requests per evicted pod", v.apiRequests/float64(v.evictions), k.apiRequests/float64(k.evictions), "")
	row("evictions per pod emptied", float64(v.evictions)/float64(v.podsEmptied), float64(k.evictions)/float64(k.podsEmptied), "")
	row("time to first eviction", v.firstEviction.Seconds(), k.firstEviction.Seconds(), "s")
	fmt.Fprintf(tw, "PDB healthy below desired (moments)\t%d\t%d\t\n", v.pdbViolations, k.pdbViolations)
	fmt.Fprintf(tw, "controller peak RSS\t%.1f MiB\t-\t\n", float64(v.controllerPeakRSS)/1024)
	fmt.Fprintf(tw, "accepted evictions / pods emptied\t%d / %d\t%d / %d\t\n", v.evictions, v.podsEmptied, k.evictions, k.podsEmptied)
	_ = tw.Flush()
}
