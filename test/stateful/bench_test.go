//go:build stateful_bench

package stateful_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// `make bench-stateful` runs TestBenchStateful: for each system, the node of
// its leader (or primary) is drained under the same client load twice, each
// time with a fresh system (new nodes, pods, servers and data on the shared
// control plane): once with `kubectl drain` and what the system's operator
// runs in its pods' preStop hook, once with vacate and the recipe, in the
// system's drain mode. It prints, per system and driver, the writes lost,
// the longest time the clients could not write, and how long the drain
// took. Each system and driver is a subtest, such as
// TestBenchStateful/rabbitmq-classic/vacate.

// benchSystem is one system, started on an app's pods.
type benchSystem struct {
	name, recipe string
	// mode is the mode of vacate's drain: Maintenance unless set. The
	// drained member never comes back in either mode, nor with kubectl
	// drain; Decommission is for a system whose recipe must move what
	// lives only on that member.
	mode  v1alpha1.DrainMode
	start func(t *testing.T, a *app) benchRun
}

// benchRun is a running system under load.
type benchRun interface {
	// sidecarEnv is what the recipe's sidecar beside member i is given.
	sidecarEnv(i int) []string
	// leader is the member that leads (the one whose node drains).
	leader(ctx context.Context) (int, error)
	// startLoad starts the client load; progress waits for it to write
	// (after the drain, a system whose data went with the member may
	// return once it shows the clients will not write again).
	startLoad(ctx context.Context) error
	progress(ctx context.Context) error
	// preStop runs what the system's operator puts in a pod's preStop hook
	// (nothing for most), before the pod's processes are stopped.
	preStop(ctx context.Context, i int) error
	// stopMember stops member i's processes, as the kubelet does once its
	// pod is deleted (SIGTERM, then SIGKILL after a grace period).
	stopMember(i int)
	// stopLoad stops the load and judges it.
	stopLoad(ctx context.Context) (testservers.Report, error)
}

var benchSystems []benchSystem

type benchRow struct {
	system, driver string
	report         testservers.Report
	drain          time.Duration
	err            error
}

func TestBenchStateful(t *testing.T) {
	var rows []benchRow
	for _, sys := range benchSystems {
		for _, driver := range []string{"kubectl drain", "vacate"} {
			t.Run(sys.name+"/"+strings.ReplaceAll(driver, " ", "-"), func(t *testing.T) {
				row := benchRow{system: sys.name, driver: driver}
				row.report, row.drain, row.err = benchOnce(t, sys, driver == "vacate")
				rows = append(rows, row)
				if row.err != nil {
					t.Error(row.err)
				}
			})
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "system\tdriver\twrites acknowledged\tlost\tduplicated\tlongest outage\tdrain time\t")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(w, "%s\t%s\t%s\t\t\t\t\t\n", r.system, r.driver, "error: "+r.err.Error())
			continue
		}
		outage := r.report.LongestOutage.Round(10 * time.Millisecond).String()
		if r.report.OutageOpen {
			outage = "never ended (>= " + outage + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", r.system, r.driver, r.report.Acked, r.report.Lost,
			r.report.Duplicated, outage, r.drain.Round(100*time.Millisecond))
	}
	w.Flush()
}

// benchOnce drains the leader's node of a fresh system under load.
func benchOnce(t *testing.T, sys benchSystem, withVacate bool) (testservers.Report, time.Duration, error) {
	a := newApp(t, benchName(sys.name, withVacate))
	ctx := testenv.Context(t)
	run := sys.start(t, a)
	if withVacate {
		for i := range a.pods {
			a.startSidecar(t, i, sys.recipe, run.sidecarEnv(i))
		}
	}
	var mu sync.Mutex
	stopped := map[int]time.Time{}
	a.setOnEvict(func(i int) {
		if !withVacate {
			if err := run.preStop(ctx, i); err != nil {
				t.Logf("preStop of member %d: %v", i, err)
			}
		}
		run.stopMember(i)
		mu.Lock()
		stopped[i] = time.Now()
		mu.Unlock()
	})
	if err := run.startLoad(ctx); err != nil {
		return testservers.Report{}, 0, err
	}
	if err := run.progress(ctx); err != nil {
		return testservers.Report{}, 0, err
	}
	leader, err := run.leader(ctx)
	if err != nil {
		return testservers.Report{}, 0, err
	}
	start := time.Now()
	if withVacate {
		a.drain(t, leader, cmp.Or(sys.mode, v1alpha1.ModeMaintenance))
		a.waitDrain(t, leader, "Drained", 10*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
			return nd.Status.Phase == v1alpha1.PhaseDrained
		})
	} else {
		cmd := exec.CommandContext(ctx, a.c.Binaries[devcluster.Kubectl], "--kubeconfig", a.c.Kubeconfig,
			"drain", a.nodes[leader], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=10m")
		if out, err := cmd.CombinedOutput(); err != nil {
			return testservers.Report{}, 0, fmt.Errorf("kubectl drain: %v\n%s", err, out)
		}
	}
	// The drain is over when the pod is gone and its processes stopped
	// (kubectl drain returns once the pod object is gone, which on
	// simulated nodes is before its preStop hook ran).
	testutil.Eventually(t, 2*time.Minute, "the leader's processes to stop", testutil.Holds(func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := stopped[leader]
		return ok
	}))
	mu.Lock()
	took := stopped[leader].Sub(start)
	mu.Unlock()
	if err := run.progress(ctx); err != nil {
		return testservers.Report{}, took, fmt.Errorf("writes after the drain: %w", err)
	}
	rep, err := run.stopLoad(ctx)
	t.Logf("%s: %s; drain %s", map[bool]string{true: "vacate", false: "kubectl drain"}[withVacate], rep, took.Round(time.Millisecond))
	return rep, took, err
}

// benchName is a short pool name for a run.
func benchName(system string, withVacate bool) string {
	if withVacate {
		return "bv-" + system
	}
	return "bk-" + system
}

// waitErr polls cond every 50 ms for up to two minutes.
func waitErr(ctx context.Context, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
}
