package testenv

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/devcluster"
	"github.com/vacate-dev/vacate/internal/operator"
)

// DrainClient installs vacate's CRDs in the cluster and returns a client
// that knows vacate's kinds and the built-in ones (a client.WithWatch).
func DrainClient(t testing.TB, c *devcluster.Cluster) client.Client {
	t.Helper()
	if err := devcluster.InstallCRDs(Context(t), c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.NewWithWatch(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// WaitForDrain polls the NodeDrain until cond holds, and fails the test with
// describe's account of the last status seen if it does not in time.
func WaitForDrain(t testing.TB, cl client.Client, name, what string, timeout time.Duration,
	cond func(*v1alpha1.NodeDrain) bool, describe func(*v1alpha1.NodeDrain) string) *v1alpha1.NodeDrain {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, types.NamespacedName{Name: name}, nd); err != nil {
			return false, nil
		}
		return cond(nd), nil
	})
	if err != nil {
		t.Fatalf("waiting for NodeDrain %s to be %s: %v; last status: %s", name, what, err, describe(nd))
	}
	return nd
}

// DescribeDrain is a NodeDrain's status in a few lines, for a failing
// test's message: phase and counts, conditions, blockers and hooks.
func DescribeDrain(nd *v1alpha1.NodeDrain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s progress=%s remaining=%d blocked=%d", nd.Status.Phase, nd.Status.Progress, nd.Status.Remaining, nd.Status.Blocked)
	for _, c := range nd.Status.Conditions {
		fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, bl := range nd.Status.Blockers {
		fmt.Fprintf(&b, "\n  blocker %s %s: %s", bl.Pod, bl.Reason, bl.Detail)
	}
	for _, h := range nd.Status.Hooks {
		fmt.Fprintf(&b, "\n  hook %s %s: %s", h.Name, h.Phase, h.Message)
	}
	return b.String()
}

// Controller installs vacate's CRDs, runs the vacate controller in process
// until the test ends, and returns a client for vacate's kinds. tune may
// change the controller's options (a test's clock).
func Controller(t testing.TB, c *devcluster.Cluster, tune ...func(*operator.Options)) client.Client {
	t.Helper()
	cl, stop := StartController(t, c, tune...)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("controller exited with %v\n%s", err, vacateGoroutines())
		}
	})
	return cl
}

// vacateGoroutines are the stacks of the goroutines that run vacate's or
// controller-runtime's code, to name what did not stop when a controller did
// not end in time.
func vacateGoroutines() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if (strings.Contains(g, "vacate-dev/vacate/") || strings.Contains(g, "sigs.k8s.io/controller-runtime/")) &&
			!strings.Contains(g, "testenv.vacateGoroutines") {
			out = append(out, g)
		}
	}
	return fmt.Sprintf("%d goroutines run vacate's code:\n%s", len(out), strings.Join(out, "\n\n"))
}

// StartController is Controller for a test that stops the controller
// itself: stop ends the operator's context (as a lost Lease or a shutdown
// does), waits for it and returns its error. The caller must call it once,
// before the test ends.
func StartController(t testing.TB, c *devcluster.Cluster, tune ...func(*operator.Options)) (_ client.Client, stop func() error) {
	t.Helper()
	cl := DrainClient(t, c)
	opts := operator.InProcessOptions()
	// The dev cluster's simulated pods live on 127.0.0.0/8.
	opts.Controllers.AllowLoopbackHooks = true
	for _, f := range tune {
		f(&opts)
	}
	stop, err := operator.Start(context.Background(), c.RESTConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cl, stop
}

// RunManager runs a controller-runtime manager against the cluster (for a
// test's own controllers, such as an evacuation provider), set up by setup,
// until stop is called or the test ends.
func RunManager(t testing.TB, c *devcluster.Cluster, setup func(ctrl.Manager) error) (stop func()) {
	t.Helper()
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(c.RESTConfig, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
