package devcluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const testLabel = "vacate.dev/test"

// TestControlPlaneRunsWorkloads walks through what every later test relies
// on: simulated nodes become Ready, a Deployment's pods run with loopback IPs,
// the disruption controller computes a PDB's status, and a real kubectl drain
// evicts pods that the ReplicaSet then replaces on other nodes.
func TestControlPlaneRunsWorkloads(t *testing.T) {
	t.Parallel()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cs := c.Client

	t.Log("creating 3 simulated nodes in 2 zones")
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{
		Prefix: "wl", Count: 3, Zones: []string{"zone-a", "zone-b"},
		Labels: map[string]string{testLabel: "workloads"},
	})
	for _, name := range nodes {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !devcluster.NodeReady(n) {
			t.Fatalf("node %s is not Ready", name)
		}
	}

	ns := testenv.Namespace(t, c)
	webPods := labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"})
	byNode := runWebWithPDB(t, ctx, c, ns, webPods)

	t.Log("waiting for the disruption controller to compute the PDB: 6 healthy, 4 required, 2 allowed")
	testutil.Eventually(t, time.Minute, "PDB status", testutil.Seen(func() (bool, string) {
		pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := pdb.Status
		return s.ObservedGeneration == pdb.Generation && s.ExpectedPods == 6 && s.CurrentHealthy == 6 &&
				s.DesiredHealthy == 4 && s.DisruptionsAllowed == 2,
			formatPDB(s.ObservedGeneration, s.ExpectedPods, s.CurrentHealthy, s.DesiredHealthy, s.DisruptionsAllowed)
	}))

	target, evicted := kubectlDrainTheLeastLoaded(t, ctx, c, nodes, byNode)
	waitForReplacements(t, ctx, c, ns, webPods, target, evicted)
	n, err := cs.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Spec.Unschedulable {
		t.Errorf("node %s is not cordoned after kubectl drain", target)
	}
}

// runWebWithPDB creates in ns a 6-replica Deployment "web" on the test's
// nodes and a PDB with minAvailable 4, waits for the pods to be Ready,
// checks each has a loopback IP from the cluster's pod range, and returns
// the pods by node.
func runWebWithPDB(t *testing.T, ctx context.Context, c *devcluster.Cluster, ns string, webPods labels.Selector) map[string][]corev1.Pod {
	t.Helper()
	cs := c.Client
	t.Log("creating a 6-replica Deployment on those nodes and a PDB with minAvailable 4")
	dep := devcluster.Deployment(ns, "web", 6)
	dep.Spec.Template.Spec.NodeSelector = map[string]string{testLabel: "workloads"}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "4", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, cs, ns, webPods, 6, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, podNet, err := net.ParseCIDR(c.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods {
		ip := net.ParseIP(p.Status.PodIP)
		if ip == nil || !ip.IsLoopback() || !podNet.Contains(ip) {
			t.Errorf("pod %s has IP %q, want one in %s (inside 127.0.0.0/8)", p.Name, p.Status.PodIP, c.PodCIDR)
		}
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	t.Logf("pods per node: %v", podCounts(byNode))
	return byNode
}

// kubectlDrainTheLeastLoaded drains, with the real kubectl, the node with
// the fewest web pods (at least one), so the PDB allows every eviction; it
// returns the node and the UIDs of the pods it evicted.
func kubectlDrainTheLeastLoaded(t *testing.T, ctx context.Context, c *devcluster.Cluster, nodes []string, byNode map[string][]corev1.Pod) (string, map[types.UID]bool) {
	t.Helper()
	target := ""
	for _, n := range nodes {
		if k := len(byNode[n]); k > 0 && (target == "" || k < len(byNode[target])) {
			target = n
		}
	}
	evicted := map[types.UID]bool{}
	for _, p := range byNode[target] {
		evicted[p.UID] = true
	}
	t.Logf("draining %s (%d web pods) with kubectl %s built from source", target, len(evicted), devcluster.KubernetesVersion)
	out, err := exec.CommandContext(ctx, c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig,
		"drain", target, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl drain: %v\n%s", err, out)
	}
	t.Logf("kubectl drain said:\n%s", out)
	if !strings.Contains(string(out), "evicting pod") {
		t.Errorf("kubectl drain did not report evicting pods")
	}
	return target, evicted
}

// waitForReplacements waits for the ReplicaSet to replace the evicted pods:
// six web pods Ready on the other nodes, none on target, none evicted left.
func waitForReplacements(t *testing.T, ctx context.Context, c *devcluster.Cluster, ns string, webPods labels.Selector, target string, evicted map[types.UID]bool) {
	t.Helper()
	t.Log("waiting for the ReplicaSet to replace the evicted pods on the other nodes")
	testutil.Eventually(t, 2*time.Minute, "replacement pods", testutil.Seen(func() (bool, string) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: webPods.String()})
		if err != nil {
			return false, err.Error()
		}
		ready, onTarget, old := 0, 0, 0
		for _, p := range list.Items {
			if p.Spec.NodeName == target {
				onTarget++
			}
			if evicted[p.UID] {
				old++
			}
			if devcluster.PodReady(&p) && p.Spec.NodeName != target {
				ready++
			}
		}
		return ready == 6 && onTarget == 0 && old == 0,
			fmt.Sprintf("ready elsewhere %d, on drained node %d, evicted still present %d", ready, onTarget, old)
	}))
}

// TestFixturesCreateCommonWorkloads checks the workload helpers that tests,
// the demo and the benchmarks build on: every kind of pod they create runs.
func TestFixturesCreateCommonWorkloads(t *testing.T) {
	t.Parallel()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: "fixtures"}
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "fx", Count: 4, Zones: []string{"zone-a", "zone-b"}, Labels: sel})
	ns := testenv.Namespace(t, c)
	if err := devcluster.CreateWorkload(ctx, c.Client, devcluster.Workload{
		Namespace: ns, DeploymentReplicas: 4, StatefulSetReplicas: 2, NodeSelector: sel,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "lonely", nodes[0]), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for app, want := range map[string]int{"web": 4, "db": 2, "agent": len(nodes), "lonely": 1} {
		pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: app}), want, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d pods Ready", app, len(pods))
	}
	// The DaemonSet put exactly one pod on each of the test's nodes.
	perNode := map[string]int{}
	agents, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: devcluster.AppLabel + "=agent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range agents.Items {
		perNode[p.Spec.NodeName]++
	}
	for _, n := range nodes {
		if perNode[n] != 1 {
			t.Errorf("node %s runs %d DaemonSet pods, want 1", n, perNode[n])
		}
	}
	zones := map[string]bool{}
	for _, n := range nodes {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		zones[node.Labels[devcluster.ZoneLabel]] = true
	}
	if len(zones) != 2 {
		t.Errorf("nodes span zones %v, want 2 zones", zones)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", 4, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestNodesAndPodsStayReadyUnderLoad runs for twice the node lifecycle
// controller's grace period (50 s) and more than twice a node lease (40 s),
// while pods churn, and fails if any node or any running pod ever stops
// being Ready. Without kwok's node lease renewal, nodes go NotReady within
// a minute. VACATE_SOAK_DURATION runs it longer.
func TestNodesAndPodsStayReadyUnderLoad(t *testing.T) {
	t.Parallel()
	duration := 100 * time.Second
	if v := os.Getenv("VACATE_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("VACATE_SOAK_DURATION: %v", err)
		}
		duration = d
	}
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cs := c.Client
	sel := map[string]string{testLabel: "soak"}
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "soak", Count: 8, Zones: []string{"zone-a", "zone-b"}, Labels: sel})
	ns := testenv.Namespace(t, c)
	const base = 80
	dep := devcluster.Deployment(ns, "load", base)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	loadPods := labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "load"})
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, loadPods, base, 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	w := newReadinessWatch(t, ctx, c, ns, nodes)
	t.Logf("watching %d nodes and their pods for %s while scaling between %d and %d replicas", len(nodes), duration, base, 2*base)
	deadline := time.Now().Add(duration)
	scale := int32(base)
	cycles := 0
	for time.Now().Before(deadline) {
		if scale == base {
			scale = 2 * base
		} else {
			scale = base
		}
		patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(int(scale)) + `}}`)
		if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, "load", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("scaling: %v", err)
		}
		cycles++
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Second):
		}
	}
	violations, podEvents := w.stop()
	t.Logf("%d scaling cycles, %d pod updates observed", cycles, podEvents)
	if podEvents == 0 {
		t.Fatal("observed no pod updates: the watch saw nothing, so the test proves nothing")
	}
	for _, v := range violations {
		t.Error(v)
	}
	// The leases must be fresh at the end, not just the conditions.
	for _, name := range nodes {
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("lease of node %s: %v", name, err)
			continue
		}
		if lease.Spec.RenewTime == nil || time.Since(lease.Spec.RenewTime.Time) > 40*time.Second {
			t.Errorf("lease of node %s was last renewed at %v", name, lease.Spec.RenewTime)
		}
	}
}

// TestComponentFailureNamesComponentAndLeavesNoProcess takes the scheduler's
// port before starting a cluster: Up must fail naming kube-scheduler, show
// its log, and stop the components that had already started.
func TestComponentFailureNamesComponentAndLeavesNoProcess(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := devcluster.Up(ctx, devcluster.Options{
		Name: "port-taken", Dir: dir, Ports: map[string]int{devcluster.KubeScheduler: port},
		StartTimeout: time.Minute,
	})
	if err == nil {
		c.Stop()
		t.Fatal("Up succeeded with the scheduler's port taken")
	}
	t.Logf("Up failed as expected:\n%v", err)
	ce, ok := devcluster.IsComponentError(err)
	if !ok {
		t.Fatalf("error is not a ComponentError: %v", err)
	}
	if ce.Component != devcluster.KubeScheduler {
		t.Errorf("failed component = %q, want %q", ce.Component, devcluster.KubeScheduler)
	}
	if !strings.Contains(ce.LogTail, "address already in use") {
		t.Errorf("log tail does not show the cause:\n%s", ce.LogTail)
	}
	if !strings.Contains(err.Error(), devcluster.KubeScheduler) || !strings.Contains(err.Error(), ce.LogPath) {
		t.Errorf("error message does not name the component and its log: %v", err)
	}
	if pids := devcluster.ProcessesUsing(dir); len(pids) > 0 {
		t.Errorf("processes left running after the failed start: %v", pids)
	}
	if _, err := devcluster.ReadState(dir); !errors.Is(err, devcluster.ErrNotRunning) {
		t.Errorf("cluster state left behind: %v", err)
	}
}

// readinessWatch records every moment a node or a running pod stops being
// Ready.
type readinessWatch struct {
	mu         sync.Mutex
	violations []string
	podEvents  int
	cancel     context.CancelFunc
	done       sync.WaitGroup
}

func newReadinessWatch(t *testing.T, ctx context.Context, c *devcluster.Cluster, ns string, nodes []string) *readinessWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w := &readinessWatch{cancel: cancel}
	ours := map[string]bool{}
	for _, n := range nodes {
		ours[n] = true
	}
	nodeWatch, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: testLabel + "=soak"})
	if err != nil {
		t.Fatal(err)
	}
	podWatch, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wasReady := map[types.UID]bool{}
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		for ev := range nodeWatch.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok && ours[n.Name] && !devcluster.NodeReady(n) {
				w.record("node " + n.Name + " is not Ready at " + time.Now().Format(time.TimeOnly))
			}
		}
	}()
	go func() {
		defer w.done.Done()
		for ev := range podWatch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			w.mu.Lock()
			w.podEvents++
			w.mu.Unlock()
			ready := devcluster.PodReady(p)
			if wasReady[p.UID] && !ready && p.DeletionTimestamp == nil {
				w.record("pod " + p.Name + " on " + p.Spec.NodeName + " lost Ready at " + time.Now().Format(time.TimeOnly))
			}
			wasReady[p.UID] = ready
		}
	}()
	return w
}

func (w *readinessWatch) record(v string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, v)
}

func (w *readinessWatch) stop() ([]string, int) {
	w.cancel()
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.violations, w.podEvents
}

func podCounts(byNode map[string][]corev1.Pod) map[string]int {
	m := map[string]int{}
	for n, ps := range byNode {
		m[n] = len(ps)
	}
	return m
}

func formatPDB(observed int64, expected, healthy, desired, allowed int32) string {
	return fmt.Sprintf("observedGeneration %d, expected %d, healthy %d, desired %d, allowed %d",
		observed, expected, healthy, desired, allowed)
}

// TestReadinessGatesDecideReady: kwok computes a pod's Ready from its
// readiness gates as the kubelet does: not Ready until the gate's
// condition is True, Ready then, and not Ready again when it turns False.
func TestReadinessGatesDecideReady(t *testing.T) {
	t.Parallel()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "gates", Count: 1})[0]
	ns := testenv.Namespace(t, c)
	const gate = "example.com/serving"
	pod := devcluster.BarePod(ns, "gated", node)
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func(want corev1.ConditionStatus, what string) {
		t.Helper()
		var last string
		testutil.Eventually(t, time.Minute, fmt.Sprintf("%s: Ready to become %s", what, want), testutil.Seen(func() (bool, string) {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil || p.Status.PodIP == "" {
				return false, last
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					last = fmt.Sprintf("%s %s", cond.Status, cond.Reason)
					return cond.Status == want, last
				}
			}
			return false, last
		}))
	}
	setGate := func(status corev1.ConditionStatus) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"lastTransitionTime":%q}]}}`,
			gate, status, time.Now().UTC().Format(time.RFC3339))
		if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	ready(corev1.ConditionFalse, "the gate unset")
	time.Sleep(time.Second) // and it stays so
	ready(corev1.ConditionFalse, "the gate still unset")
	setGate(corev1.ConditionTrue)
	ready(corev1.ConditionTrue, "the gate True")
	setGate(corev1.ConditionFalse)
	ready(corev1.ConditionFalse, "the gate False again")
}
