// Package testenv gives a package's tests one real dev cluster, started on
// first use and stopped when the package's tests end.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// and in a test:
//
//	c := testenv.Start(t)
//	ns := testenv.Namespace(t, c)
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var (
	mainUsed bool
	tunes    []func(*devcluster.Options)
	once     sync.Once
	shared   *devcluster.Cluster
	startErr error
	dir      string
)

// EvictionRequestAPI is a Main option: the shared cluster serves Kubernetes
// 1.37's EvictionRequest API.
func EvictionRequestAPI(o *devcluster.Options) { o.EvictionRequestAPI = true }

// Main runs the tests and then stops the shared cluster, if one was started.
// Its directory (logs included) is removed when every test passed and kept,
// with its path printed, otherwise. tune adjusts the options the shared
// cluster starts with (EvictionRequestAPI).
func Main(m *testing.M, tune ...func(*devcluster.Options)) int {
	// Controllers run in the test process log nowhere; tests assert on
	// what the controllers write to the cluster.
	ctrllog.SetLogger(logr.Discard())
	mainUsed = true
	tunes = tune
	code := m.Run()
	testutil.RemovePrograms()
	if shared != nil {
		shared.Stop()
	}
	if dir != "" {
		if code == 0 {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintf(os.Stderr, "testenv: dev cluster logs kept in %s/logs\n", dir)
		}
	}
	return code
}

// Start returns the package's shared dev cluster, starting it on first use.
func Start(t testing.TB) *devcluster.Cluster {
	t.Helper()
	if !mainUsed {
		t.Fatal("testenv.Start needs `func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }` in the package, so the cluster is stopped when the tests end")
	}
	once.Do(func() {
		dir, startErr = os.MkdirTemp("", "vacate-test-")
		if startErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		opts := devcluster.Options{
			Name: fmt.Sprintf("test-%d", os.Getpid()),
			Dir:  dir,
			Out:  progressWriter{},
		}
		for _, f := range tunes {
			f(&opts)
		}
		shared, startErr = devcluster.Up(ctx, opts)
	})
	if startErr != nil {
		t.Fatalf("starting the dev cluster: %v", startErr)
	}
	if os.Getenv("VACATE_TEST_CPU") != "" {
		accountCPU(t, shared)
	}
	return shared
}

var accounted sync.Map // test name -> true

// accountCPU prints, when the test ends, the processor time it cost: the
// test process's own and each dev-cluster component's, on the error stream
// (VACATE_TEST_CPU=1) or appended to a file (VACATE_TEST_CPU=path, for a
// whole suite: go test shows a passing package's output only with -v); see
// docs/dev/test-suite.md. Work a test leaves behind, such as a
// namespace being deleted, counts to the next one.
func accountCPU(t testing.TB, c *devcluster.Cluster) {
	if _, seen := accounted.LoadOrStore(t.Name(), true); seen {
		return
	}
	self0, comps0 := selfCPU(), c.CPU()
	t.Cleanup(func() {
		self, comps := selfCPU()-self0, c.CPU()
		total := self
		parts := []string{fmt.Sprintf("test=%.1f", self.Seconds())}
		for _, name := range []string{devcluster.KubeAPIServer, devcluster.Etcd, devcluster.KubeControllerManager, devcluster.KubeScheduler, devcluster.Kwok} {
			d := comps[name] - comps0[name]
			total += d
			parts = append(parts, fmt.Sprintf("%s=%.1f", name, d.Seconds()))
		}
		line := fmt.Sprintf("testenv-cpu: %s %s %.1f CPU-s (%s)\n", filepath.Base(os.Args[0]), t.Name(), total.Seconds(), strings.Join(parts, " "))
		if path := os.Getenv("VACATE_TEST_CPU"); path != "1" {
			if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				_, _ = f.WriteString(line)
				_ = f.Close()
				return
			}
		}
		fmt.Fprint(os.Stderr, line)
	})
}

// selfCPU is the processor time this process has used, and that of its
// children it has waited for.
func selfCPU() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(v syscall.Timeval) time.Duration { return time.Duration(v.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}

// progressWriter shows only the slow, first-time build messages.
type progressWriter struct{}

func (progressWriter) Write(p []byte) (int, error) {
	if s := string(p); strings.HasPrefix(s, "build") {
		fmt.Fprint(os.Stderr, "testenv: "+s)
	}
	return len(p), nil
}

// Context returns a context that ends with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace for the test, deleted when it ends.
func Namespace(t testing.TB, c *devcluster.Cluster) string {
	t.Helper()
	prefix := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(prefix) > 40 {
		prefix = prefix[:40]
	}
	ns, err := devcluster.CreateNamespace(context.Background(), c.Client, strings.Trim(prefix, "-")+"-")
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return ns
}

// Nodes creates simulated nodes for the test, deleted when it ends, and
// waits until they are Ready.
func Nodes(t testing.TB, c *devcluster.Cluster, set devcluster.NodeSet) []string {
	t.Helper()
	ctx := context.Background()
	names, err := devcluster.CreateNodes(ctx, c.Client, set)
	t.Cleanup(func() {
		for _, n := range names {
			_ = c.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	if err != nil {
		t.Fatalf("creating nodes: %v", err)
	}
	if err := devcluster.WaitForNodesReady(ctx, c.Client, names, time.Minute); err != nil {
		t.Fatal(err)
	}
	return names
}

// PodsOnNode lists the pods bound to node.
func PodsOnNode(t testing.TB, c *devcluster.Cluster, node string) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatalf("listing pods on %s: %v", node, err)
	}
	return list.Items
}
