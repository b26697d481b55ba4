// Package stateful_test proves the recipes of examples/ (docs/recipes)
// against the real servers: RabbitMQ, PostgreSQL under Patroni and Redis
// with Sentinel run as local processes, one member per simulated pod of a
// StatefulSet on the dev cluster, on that pod's IP, with vacate-hook (built
// from this repository) beside each as its sidecar, running the recipe's
// configuration from examples/ as users deploy it. The tests share one dev
// cluster and drain the nodes with the real controller.
package stateful_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/requests"
)

var binDir string

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "vacate-stateful-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.Main(m)
	os.RemoveAll(binDir)
	os.Exit(code)
}

// hookPort is a port free on every address, where an app's sidecars serve
// the protocol on their pods' IPs (its pods' vacate.dev/evacuate-port): not
// the recipes' 7070, so that two runs on one machine never collide, even
// when their dev clusters' pod ranges coincide. The recipes take it as
// vacate-hook's --listen, as they would any port.
func hookPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatalf("finding a free port for the sidecars: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var buildHook sync.Once

// vacateHook builds vacate-hook once for the package, as `make build` does.
func vacateHook(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "vacate-hook")
	buildHook.Do(func() { testutil.BuildProgram(t, "github.com/vacate-dev/vacate/cmd/vacate-hook", bin) })
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("vacate-hook was not built: %v", err)
	}
	return bin
}

// recipeDir is a recipe's folder in examples/.
func recipeDir(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "examples", name)
	if _, err := os.Stat(filepath.Join(dir, "vacate-hook.yaml")); err != nil {
		t.Fatalf("recipe %s: %v", name, err)
	}
	return dir
}

// app is one system on the dev cluster: a StatefulSet of three pods, one
// per node of a pool of its own (required anti-affinity), with the HTTP
// hook annotations, a PodDisruptionBudget allowing one pod down, and a
// DrainPolicy for the pool that allows HTTP hooks.
type app struct {
	c     *devcluster.Cluster
	cl    client.Client
	ns    string
	name  string
	nodes []string
	// port is where the sidecars serve the protocol (hookPort).
	port int
	// pods[i] is the StatefulSet's pod of ordinal i, on nodes[i].
	pods []corev1.Pod

	mu sync.Mutex
	// evicted is when each pod (by name) was first seen terminating.
	evicted map[string]time.Time
	// onEvict runs once per pod (by UID) when it is first seen
	// terminating: the test stops that member's processes, as the kubelet
	// stops the pod's containers.
	onEvict func(ordinal int)
}

func newApp(t *testing.T, name string, tune ...func(*v1alpha1.DrainPolicySpec)) *app {
	t.Helper()
	return newShapedApp(t, name, nil, tune...)
}

// newShapedApp is newApp with the StatefulSet's pod template shaped as an
// operator would make it (shape runs last, on the template newApp builds).
func newShapedApp(t *testing.T, name string, shape func(*corev1.PodTemplateSpec), tune ...func(*v1alpha1.DrainPolicySpec)) *app {
	t.Helper()
	c := testenv.Start(t)
	a := &app{c: c, cl: testenv.Controller(t, c), ns: testenv.Namespace(t, c), name: name, port: hookPort(t), evicted: map[string]time.Time{}}
	ctx := testenv.Context(t)
	a.nodes = testenv.Nodes(t, c, devcluster.NodeSet{Prefix: name, Count: 3, Labels: map[string]string{"pool": name}})
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(1))},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}}
	for _, f := range tune {
		f(&dp.Spec)
	}
	if err := a.cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.cl.Delete(context.Background(), dp) })
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, a.ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	sts := devcluster.StatefulSet(a.ns, name, 3)
	spec := &sts.Spec.Template.Spec
	sts.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(a.port)}
	spec.NodeSelector = map[string]string{"pool": name}
	spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: name}},
			TopologyKey:   devcluster.HostnameLabel,
		}},
	}}
	if shape != nil {
		shape(&sts.Spec.Template)
	}
	if _, err := c.Client.CoreV1().Services(a.ns).Create(ctx, devcluster.HeadlessService(a.ns, name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().StatefulSets(a.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(a.ns).Create(ctx, devcluster.PDB(a.ns, name, name, "", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := devcluster.WaitForPodsReady(ctx, c.Client, a.ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), 3, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ready = settledPods(ctx, t, c, a.ns, name, ready)
	sort.Slice(ready, func(i, j int) bool { return ready[i].Name < ready[j].Name })
	a.pods = ready
	a.nodes = a.nodes[:0]
	for _, p := range ready {
		a.nodes = append(a.nodes, p.Spec.NodeName)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, a.ns, name, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	a.watchEvictions(t)
	return a
}

// settledPods reads the pods again until their IPs stay the same for half
// a second: kwok (v0.7.0) may apply its pod-ready stage twice to one pod,
// milliseconds apart, before it sees its own first patch, giving the pod a
// second IP after it was first seen Ready (seen in a suite run: a member's
// sidecar listened on the first IP, the controller called the second).
func settledPods(ctx context.Context, t *testing.T, c *devcluster.Cluster, ns, name string, pods []corev1.Pod) []corev1.Pod {
	t.Helper()
	ips := func(list []corev1.Pod) string {
		out := make([]string, 0, len(list))
		for _, p := range list {
			out = append(out, p.Name+"="+p.Status.PodIP)
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		time.Sleep(500 * time.Millisecond)
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: devcluster.AppLabel + "=" + name})
		if err != nil {
			t.Fatal(err)
		}
		if ips(list.Items) == ips(pods) || time.Now().After(deadline) {
			return list.Items
		}
		t.Logf("pod addresses changed after Ready: %s, now %s", ips(pods), ips(list.Items))
		pods = list.Items
	}
}

// IPs are the pods' IPs, by ordinal: where each member listens.
func (a *app) IPs() []string {
	ips := make([]string, len(a.pods))
	for i, p := range a.pods {
		ips[i] = p.Status.PodIP
	}
	return ips
}

func (a *app) ordinal(name string) int {
	for i, p := range a.pods {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// watchEvictions records when each of the set's first pods starts
// terminating, and calls onEvict for it.
func (a *app) watchEvictions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	w, err := a.c.Client.CoreV1().Pods(a.ns).Watch(ctx, metav1.ListOptions{LabelSelector: devcluster.AppLabel + "=" + a.name})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[types.UID]bool{}
	first := map[types.UID]bool{}
	for _, p := range a.pods {
		first[p.UID] = true
	}
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !first[p.UID] || seen[p.UID] || (p.DeletionTimestamp == nil && ev.Type != "DELETED") {
				continue
			}
			seen[p.UID] = true
			a.mu.Lock()
			a.evicted[p.Name] = time.Now()
			f := a.onEvict
			a.mu.Unlock()
			if f != nil {
				f(a.ordinal(p.Name))
			}
		}
	}()
}

// evictedAt is when the pod of an ordinal was first seen terminating.
func (a *app) evictedAt(i int) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.evicted[a.pods[i].Name]
	return at, ok
}

// setOnEvict sets what runs when a pod is first seen terminating.
func (a *app) setOnEvict(f func(ordinal int)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onEvict = f
}

const requester = "cli:stateful-test"

// drain asks for a drain of the node of the pod of an ordinal.
func (a *app) drain(t *testing.T, i int, mode v1alpha1.DrainMode) {
	t.Helper()
	node := a.nodes[i]
	if err := requests.Apply(testenv.Context(t), a.cl, node, v1alpha1.Requester{Name: requester, Reason: "test drain of " + a.pods[i].Name}, mode, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
}

// cancel withdraws the test's request, as `vacate cancel` does: the drain
// is undone.
func (a *app) cancel(t *testing.T, i int) {
	t.Helper()
	ctx := testenv.Context(t)
	nd := &v1alpha1.NodeDrain{}
	if err := a.cl.Get(ctx, types.NamespacedName{Name: a.nodes[i]}, nd); err != nil {
		t.Fatal(err)
	}
	nd, err := requests.Withdraw(ctx, a.cl, nd, requester)
	if err == nil {
		_, err = requests.DeleteIfIdle(ctx, a.cl, nd)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitDrain waits for the drain of an ordinal's node to satisfy cond.
func (a *app) waitDrain(t *testing.T, i int, what string, timeout time.Duration, cond func(*v1alpha1.NodeDrain) bool) *v1alpha1.NodeDrain {
	t.Helper()
	return testenv.WaitForDrain(t, a.cl, a.nodes[i], what, timeout, cond, describeDrain)
}

func describeDrain(nd *v1alpha1.NodeDrain) string {
	return fmt.Sprintf("%s; hooks %+v", testenv.DescribeDrain(nd), nd.Status.Hooks)
}

// hookMessage is what the drain of an ordinal's node shows of the pod's
// hook, and what `vacate explain` says of it.
func (a *app) explainPod(t *testing.T, nd *v1alpha1.NodeDrain, i int) string {
	t.Helper()
	in, err := explain.Read(testenv.Context(t), a.c.Client, nd)
	if err != nil {
		t.Fatal(err)
	}
	in.Now = time.Now()
	var said []string
	for _, f := range explain.Explain(in).Findings {
		if strings.Contains(f.Subject, a.pods[i].Name) {
			said = append(said, f.Cause)
		}
	}
	return strings.Join(said, "; ")
}

// sidecarProc is vacate-hook beside one member, as its pod's native
// sidecar: the recipe's configuration, on the pod's IP, with a state
// directory that outlives a restart of the sidecar (an emptyDir).
type sidecarProc struct {
	bin, config, ip string
	port            int
	env             []string
	log             *os.File

	// mu serialises start, stop, kill and crash: an eviction stops the
	// sidecar from the watch's goroutine.
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startSidecar runs vacate-hook with a recipe's vacate-hook.yaml for the
// pod of an ordinal. The configuration is the recipe's with two changes
// only: stateDir is a directory of the test's, and the recipe's own files,
// which its manifest mounts at /etc/vacate-hook, are read from examples/.
// env is what the pod's containers would have (the app's CLI settings).
func (a *app) startSidecar(t *testing.T, i int, recipe string, env []string) *sidecarProc {
	t.Helper()
	return a.startSidecarWith(t, i, recipe, env, nil)
}

// startSidecarWith is startSidecar with the recipe's configuration changed
// by edit first (nil: as it is).
func (a *app) startSidecarWith(t *testing.T, i int, recipe string, env []string, edit func(cfg map[string]any)) *sidecarProc {
	t.Helper()
	dir := recipeDir(t, recipe)
	text, err := os.ReadFile(filepath.Join(dir, "vacate-hook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(text, &cfg); err != nil {
		t.Fatalf("%s/vacate-hook.yaml: %v", recipe, err)
	}
	if edit != nil {
		edit(cfg)
	}
	work := t.TempDir()
	cfg["auth"] = testenv.HookAuth(t, a.c, a.ns, "default", work)
	env = append(testenv.HookEnv(&a.pods[i]), env...)
	cfg["stateDir"] = filepath.Join(work, "state")
	if err := os.Mkdir(cfg["stateDir"].(string), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(work, "config.yaml")
	if err := os.WriteFile(config, []byte(strings.ReplaceAll(string(out), "/etc/vacate-hook/", dir+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(work, "sidecar.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &sidecarProc{bin: vacateHook(t), config: config, ip: a.pods[i].Status.PodIP, port: a.port, env: env, log: log}
	s.start(t)
	t.Cleanup(func() {
		s.kill()
		log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(log.Name())
			t.Logf("vacate-hook beside %s:\n%s", a.pods[i].Name, data)
		}
	})
	return s
}

func (s *sidecarProc) url() string { return "http://" + net.JoinHostPort(s.ip, fmt.Sprint(s.port)) }

// start runs the sidecar and waits until it answers /healthz.
func (s *sidecarProc) start(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmd = exec.Command(s.bin, "--config", s.config, "--listen", net.JoinHostPort(s.ip, fmt.Sprint(s.port)))
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// A test killed at its timeout runs no cleanup: the kernel kills the
	// sidecar with the test process.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-s.done:
			return false, fmt.Errorf("vacate-hook exited")
		default:
		}
		resp, err := http.Get(s.url() + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		data, _ := os.ReadFile(s.log.Name())
		t.Fatalf("vacate-hook on %s did not start: %v\n%s", s.ip, err, data)
	}
}

// kill stops the sidecar at once (SIGKILL), as a crash or an OOM kill
// would. The commands it ran are in process groups of their own and go on,
// as they would in the container until the runtime stops it; stop them
// with the member.
func (s *sidecarProc) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *sidecarProc) killLocked() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// crash kills the sidecar and every command it runs (SIGKILL), as the
// container runtime does when the sidecar's container dies: all of the
// container's processes go. Each command leads a process group of its own.
func (s *sidecarProc) crash() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = s.cmd.Process.Signal(syscall.SIGSTOP) // starts nothing more
	for _, child := range testservers.Children(pid) {
		_ = syscall.Kill(-child, syscall.SIGKILL)
	}
	s.killLocked()
}

// logText is what the sidecar logged so far.
func (s *sidecarProc) logText() string {
	data, _ := os.ReadFile(s.log.Name())
	return string(data)
}

// stop stops the sidecar as the kubelet does (SIGTERM): its running
// commands are killed; each drain's state stays in its state directory.
func (s *sidecarProc) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
}

// sampler records a system's own view (who leads, who is primary) every
// interval, so that a test can say what the system said at any moment of
// the drain, not only at its end.
type sampler struct {
	mu      sync.Mutex
	samples []sample
	stop    func()
}

type sample struct {
	at   time.Time
	view string
}

// sample starts calling view every interval until the test ends or stop.
func sampleView(t *testing.T, interval time.Duration, view func(context.Context) string) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := &sampler{}
	s.stop = func() { cancel(); <-done }
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			s.stop()
		}
	})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			v := view(ctx)
			s.mu.Lock()
			s.samples = append(s.samples, sample{at: time.Now(), view: v})
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	return s
}

// before is the last view sampled before at (and whether there was one).
func (s *sampler) before(at time.Time) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.samples) - 1; i >= 0; i-- {
		if s.samples[i].at.Before(at) {
			return s.samples[i].view, true
		}
	}
	return "", false
}

// changes are the distinct views in order, with when each was first seen.
func (s *sampler) changes() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	last := "\x00"
	for _, x := range s.samples {
		if x.view != last {
			fmt.Fprintf(&b, "\n  %s %s", x.at.Format("15:04:05.000"), x.view)
			last = x.view
		}
	}
	return b.String()
}
