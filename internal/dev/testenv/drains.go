package testenv

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
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

// WaitForDrain waits until cond holds for the NodeDrain, and fails the
// test with describe's account of the last status seen if it does not in
// time. It follows the drain with a watch (every version is judged, none
// is missed between two polls, and a waiting test costs the API server
// nothing); cond is also judged again on the last version seen every
// quarter of a second, for conditions that read the clock or the cluster.
// A client that cannot watch is polled.
func WaitForDrain(t testing.TB, cl client.Client, name, what string, timeout time.Duration,
	cond func(*v1alpha1.NodeDrain) bool, describe func(*v1alpha1.NodeDrain) string) *v1alpha1.NodeDrain {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nd := &v1alpha1.NodeDrain{}
	if follow(ctx, cl, name, nd, cond) {
		return nd
	}
	t.Fatalf("waiting for NodeDrain %s to be %s: %v; last status: %s", name, what, ctx.Err(), describe(nd))
	return nil
}

// follow keeps nd at the latest version of the NodeDrain it saw, until cond
// holds for it (true) or ctx ends (false).
func follow(ctx context.Context, cl client.Client, name string, nd *v1alpha1.NodeDrain, cond func(*v1alpha1.NodeDrain) bool) bool {
	seen := false
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	wc, canWatch := cl.(client.WithWatch)
	for ctx.Err() == nil {
		list := &v1alpha1.NodeDrainList{}
		if err := cl.List(ctx, list, client.MatchingFields{"metadata.name": name}); err == nil {
			if len(list.Items) == 1 {
				*nd, seen = list.Items[0], true
			}
			if seen && cond(nd) {
				return true
			}
		}
		var events <-chan watch.Event
		var w watch.Interface
		if canWatch && list.ResourceVersion != "" {
			var err error
			w, err = wc.Watch(ctx, &v1alpha1.NodeDrainList{}, client.MatchingFields{"metadata.name": name},
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
			if err == nil {
				events = w.ResultChan()
			}
		}
		if done, ok := followEvents(ctx, events, tick.C, nd, &seen, cond); done {
			if w != nil {
				w.Stop()
			}
			return ok
		}
		if w != nil {
			w.Stop()
		}
	}
	return false
}

// followEvents judges each version the watch brings, and the last version
// at each tick. It returns done when cond held (ok) or ctx ended; else the
// watch closed (or there is none and a tick passed) and the caller lists
// again.
func followEvents(ctx context.Context, events <-chan watch.Event, tick <-chan time.Time, nd *v1alpha1.NodeDrain, seen *bool,
	cond func(*v1alpha1.NodeDrain) bool) (done, ok bool) {
	for {
		select {
		case <-ctx.Done():
			return true, false
		case <-tick:
			if *seen && cond(nd) {
				return true, true
			}
			if events == nil {
				return false, false // no watch: poll
			}
		case ev, open := <-events:
			if !open || ev.Type == watch.Error {
				return false, false
			}
			if got, isDrain := ev.Object.(*v1alpha1.NodeDrain); isDrain && ev.Type != watch.Deleted {
				*nd, *seen = *got.DeepCopy(), true
				if cond(nd) {
					return true, true
				}
			}
		}
	}
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
	if err := devcluster.InstallControllerIdentity(Context(t), c.RESTConfig); err != nil {
		t.Fatal(err)
	}
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
