package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// env is what a driver works with in one run.
type env struct {
	c           *devcluster.Cluster
	cl          client.Client // the harness's, as cluster admin
	r           recipe
	targets     []string
	nodes       []string // every node, sorted by number
	kubeconfigs map[string]string
	bins        binaries
	ctrl        *controller // running when the driver uses vacate
}

// binaries are the programs the drivers run.
type binaries struct {
	controller string // vacate-controller
	self       string // this program, for the tight client
	kubectl    string
}

// usage is what a drainer's processes used during the drain.
type usage struct {
	cpu     float64 // CPU seconds
	rss     float64 // peak RSS, MiB
	seconds float64 // the wall time the CPU was measured over (0: not known)
}

// driver drains the targets one way.
type driver struct {
	name string
	user string // whose requests are the drainer's
	// policy, when set, is the DrainPolicy vacate-controller runs with.
	policy func(e *env) (*v1alpha1.DrainPolicy, error)
	drain  func(ctx context.Context, e *env) (usage, error)
	// first marks the first-eviction drivers: they drain and undo nodes one
	// at a time, so only their first-eviction figures mean something.
	first bool
}

// policyWith returns the default DrainPolicy with maxParallelNodes from the
// recipe and batchWindow (nil: the default).
func policyWith(maxParallel func(r recipe, drained int) string, window *time.Duration) func(e *env) (*v1alpha1.DrainPolicy, error) {
	return func(e *env) (*v1alpha1.DrainPolicy, error) {
		p := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultPolicyName}}
		mp := intstr.Parse(maxParallel(e.r, len(e.targets)))
		p.Spec.Concurrency.MaxParallelNodes = &mp
		if window != nil {
			p.Spec.Concurrency.BatchWindow = &metav1.Duration{Duration: *window}
		}
		return p, nil
	}
}

func one(recipe, int) string { return "1" }

func allTargets(r recipe, drained int) string {
	if r.maxParallel != "" {
		return r.maxParallel
	}
	return fmt.Sprint(drained)
}

// controllerFlags are vacate-controller's flags in every run: its defaults
// but for the kubeconfig and no metrics or probe listeners (the machine is
// shared; their ports could be taken).
func controllerFlags(kubeconfig string, extra []string) []string {
	return append([]string{"--kubeconfig", kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, extra...)
}

// controller is a running vacate-controller.
type controller struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startController runs vacate-controller and waits until it leads and its
// NodeDrain controller has started its workers.
func startController(ctx context.Context, e *env) (*controller, error) {
	logPath := filepath.Join(e.c.Dir, "logs", "vacate-controller.log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.bins.controller, controllerFlags(e.kubeconfigs[controllerUser], e.r.ctrlFlags)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting vacate-controller: %w", err)
	}
	c := &controller{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(c.done) }()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-c.done:
			return false, fmt.Errorf("vacate-controller exited; see %s", logPath)
		default:
		}
		b, _ := os.ReadFile(logPath)
		s := strings.ToLower(string(b))
		return strings.Contains(s, "successfully acquired lease") && workersStarted(s), nil
	})
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("waiting for vacate-controller to lead: %w", err)
	}
	return c, nil
}

// workersStarted reports whether the (lower-cased) log shows the NodeDrain controller's
// workers started (its caches are synced then).
func workersStarted(log string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "starting workers") && strings.Contains(l, "nodedrain") {
			return true
		}
	}
	return false
}

func (c *controller) pid() int { return c.cmd.Process.Pid }

func (c *controller) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// idleCPU is the controller's CPU, in cores, while it has nothing to do:
// measured over window after a settle (the caches' first lists, and the
// collections after them, are done). What the controller spends in a
// drain's time beside its evictions (the cluster's other events, the
// collector, leader election) is this rate times the drain's length, so a
// longer drain costs more per eviction at the same work.
func idleCPU(c *controller, settle, window time.Duration) (float64, error) {
	time.Sleep(settle)
	cpu0, err := cpuSeconds(c.pid())
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	cpu1, err := cpuSeconds(c.pid())
	if err != nil {
		return 0, err
	}
	return (cpu1 - cpu0) / window.Seconds(), nil
}

// controllerUsage reads the controller's CPU time and peak RSS.
func controllerUsage(c *controller) (cpu float64, rssKB int64, err error) {
	cpu, err = cpuSeconds(c.pid())
	if err != nil {
		return 0, 0, err
	}
	rssKB, err = peakRSS(c.pid())
	return cpu, rssKB, err
}

// drainWithVacate creates one NodeDrain per target at once and waits until
// all are Drained.
func drainWithVacate(ctx context.Context, e *env) (usage, error) {
	cpu0, _, err := controllerUsage(e.ctrl)
	if err != nil {
		return usage{}, err
	}
	began := time.Now()
	for _, n := range e.targets {
		nd := testutil.NodeDrain(n, "", "bench") // marked as one command's batch, as vacate drain n1 ... nN does
		nd.Spec.Requesters[0].Batch = &v1alpha1.RequestBatch{ID: "bench", Size: int32(len(e.targets))}
		if err := e.cl.Create(ctx, nd); err != nil {
			return usage{}, fmt.Errorf("creating NodeDrain %s: %w", n, err)
		}
	}
	if err := waitDrained(ctx, e.cl, e.targets, 30*time.Minute); err != nil {
		return usage{}, err
	}
	cpu1, rss, err := controllerUsage(e.ctrl)
	if err != nil {
		return usage{}, err
	}
	return usage{cpu: cpu1 - cpu0, rss: float64(rss) / 1024, seconds: time.Since(began).Seconds()}, nil
}

// waitDrained polls until every named NodeDrain is Drained.
func waitDrained(ctx context.Context, cl client.Client, names []string, timeout time.Duration) error {
	pending := append([]string(nil), names...)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var still []string
		for _, n := range pending {
			nd := &v1alpha1.NodeDrain{}
			if err := cl.Get(ctx, types.NamespacedName{Name: n}, nd); err != nil || nd.Status.Phase != v1alpha1.PhaseDrained {
				still = append(still, n)
			}
		}
		pending = still
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for drains %v: %w", pending, err)
	}
	return nil
}

// kubectlDrain runs `kubectl drain` over groups of nodes: one process per
// group, groups one after another when sequential, all at once otherwise.
func kubectlDrain(groups [][]string, sequential bool) func(ctx context.Context, e *env) (usage, error) {
	return func(ctx context.Context, e *env) (usage, error) {
		var (
			mu   sync.Mutex
			u    usage
			errs []error
		)
		runOne := func(nodes []string) {
			pu, err := runKubectl(ctx, e, nodes)
			mu.Lock()
			defer mu.Unlock()
			u.cpu += pu.cpu
			u.rss = math.Max(u.rss, pu.rss)
			if err != nil {
				errs = append(errs, err)
			}
		}
		if sequential {
			for _, g := range groups {
				runOne(g)
			}
		} else {
			var wg sync.WaitGroup
			for _, g := range groups {
				wg.Add(1)
				go func() { defer wg.Done(); runOne(g) }()
			}
			wg.Wait()
		}
		if len(errs) > 0 {
			return u, errs[0]
		}
		return u, nil
	}
}

func runKubectl(ctx context.Context, e *env, nodes []string) (usage, error) {
	args := append([]string{"--kubeconfig", e.kubeconfigs[kubectlUser], "drain"}, nodes...)
	args = append(args, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30m")
	cmd := exec.CommandContext(ctx, e.bins.kubectl, args...)
	out, u, err := runMeasured(cmd)
	if err != nil {
		return u, fmt.Errorf("kubectl drain %s: %w\n%s", strings.Join(nodes, " "), err, tail(string(out), 10))
	}
	return u, nil
}

// runMeasured runs cmd to its end and returns its output, its CPU time and
// its peak RSS. The peak is the largest VmHWM read from /proc every 50 ms
// while it runs (what it grew by in its last 50 ms is missed): the rusage
// ru_maxrss of a child is no measure on Linux, as a process started from
// this one carries this one's peak RSS over the exec (the signal struct's
// maxrss takes the old memory map's high-water mark), so it reported the
// harness's own peak, hundreds of MiB at scale, for kubectl and the tight
// client alike.
func runMeasured(cmd *exec.Cmd) ([]byte, usage, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, usage{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peakKB int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if kb, err := peakRSS(cmd.Process.Pid); err == nil && kb > peakKB {
			peakKB = kb
		}
		select {
		case err := <-done:
			st := cmd.ProcessState
			u := usage{cpu: (st.UserTime() + st.SystemTime()).Seconds(), rss: float64(peakKB) / 1024}
			return out.Bytes(), u, err
		case <-tick.C:
		}
	}
}

// drainTight runs the tight client as its own process (this program with
// -tight-client).
func drainTight(ctx context.Context, e *env) (usage, error) {
	cmd := exec.CommandContext(ctx, e.bins.self, "-tight-client", "-tight-kubeconfig", e.kubeconfigs[tightUser],
		"-tight-nodes", strings.Join(e.targets, ","))
	out, u, err := runMeasured(cmd)
	if err != nil {
		return u, fmt.Errorf("tight client: %w\n%s", err, tail(string(out), 10))
	}
	return u, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// firstEvictions drains the first n nodes one at a time with the controller
// already running: create the NodeDrain, wait until Drained, delete it and
// wait until vacate has undone it. The delays are read from the audit log
// afterwards (see firstEvictionDelays).
func firstEvictions(n int) func(ctx context.Context, e *env) (usage, error) {
	return func(ctx context.Context, e *env) (usage, error) {
		cpu0, _, err := controllerUsage(e.ctrl)
		if err != nil {
			return usage{}, err
		}
		for _, node := range e.nodes[:min(n, len(e.nodes))] {
			if err := drainAndUndo(ctx, e.cl, node); err != nil {
				return usage{}, err
			}
		}
		cpu1, rss, err := controllerUsage(e.ctrl)
		if err != nil {
			return usage{}, err
		}
		return usage{cpu: cpu1 - cpu0, rss: float64(rss) / 1024}, nil
	}
}

func drainAndUndo(ctx context.Context, cl client.Client, node string) error {
	nd := testutil.NodeDrain(node, "", "bench")
	nd.Spec.Requesters[0].Batch = &v1alpha1.RequestBatch{ID: "bench", Size: 1} // as vacate drain NODE marks it
	if err := cl.Create(ctx, nd); err != nil {
		return fmt.Errorf("creating NodeDrain %s: %w", node, err)
	}
	if err := waitDrained(ctx, cl, []string{node}, 10*time.Minute); err != nil {
		return err
	}
	if err := cl.Delete(ctx, nd); err != nil {
		return fmt.Errorf("deleting NodeDrain %s: %w", node, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		return apierrors.IsNotFound(err), nil
	})
}

// firstEvictionDelays pairs each NodeDrain creation (by the harness) with
// the controller's first eviction request received after it; drains run one
// at a time, so that eviction is the drain's.
func firstEvictionDelays(reqs []request, admin string) []time.Duration {
	var out []time.Duration
	var created time.Time
	for _, r := range reqs {
		switch {
		case r.user == admin && r.verb == "create" && r.resource == "nodedrains" && r.accepted():
			created = r.received
		case r.user == controllerUser && r.eviction() && !created.IsZero():
			out = append(out, r.received.Sub(created))
			created = time.Time{}
		}
	}
	return out
}
