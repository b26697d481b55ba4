// Package servedrain measures what a drain does to a service's users: it
// drains nodes that run a Deployment of real HTTP servers (internal/dev/traffic)
// while a load balancer stand-in sends steady traffic to the ready
// endpoints, and counts the requests that failed and the time the drain
// took. `make bench-endpoints` and the demo run it with `kubectl drain`,
// with vacate, with and without the readiness gate vacate.dev/serving, and
// with a preStop sleep.
package servedrain

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
)

// Drainer is what drains the nodes.
type Drainer string

const (
	// Kubectl is `kubectl drain` over the nodes, one process.
	Kubectl Drainer = "kubectl drain"
	// Vacate is a NodeDrain per node, under a DrainPolicy that lets them
	// all run at once.
	Vacate Drainer = "vacate"
)

// Scenario is one way to drain.
type Scenario struct {
	Drainer Drainer
	// Gate gives the pods vacate's readiness gate.
	Gate bool
	// PreStop keeps each server serving that long after SIGTERM, as a
	// preStop sleep does.
	PreStop time.Duration
	// Surge drains under a DrainPolicy of surge.pods All.
	Surge bool
}

// String names the scenario as the reports do.
func (s Scenario) String() string {
	out := string(s.Drainer)
	switch {
	case s.Gate:
		out += ", readiness gate"
	case s.Drainer == Vacate:
		out += ", no gate"
	}
	if s.PreStop > 0 {
		out += fmt.Sprintf(", preStop sleep %s", s.PreStop)
	}
	if s.Surge {
		out += ", surge"
	}
	return out
}

// Setup is what every scenario shares.
type Setup struct {
	Cluster *devcluster.Cluster
	// Client reads and writes vacate's kinds, as cluster admin.
	Client  client.Client
	Network *traffic.Network
	// Kubectl is the kubectl binary, for the Kubectl drainer.
	Kubectl string
	// Nodes per scenario, of which the Drain with the most pods are
	// drained; Replicas of the Deployment spread over them. Defaults 4, 2,
	// 8.
	Nodes, Drain int
	Replicas     int32
	// Rate and Lag of the load balancer stand-in. Defaults 200/s and 1s.
	Rate float64
	Lag  time.Duration
	// Settle is the DrainPolicy's endpoints.settleTime. Default 2s.
	Settle time.Duration
	// PDB is the Deployment's PodDisruptionBudget (traffic.Workload.PDB):
	// "" for maxUnavailable 1.
	PDB string
	// KubectlTimeout bounds `kubectl drain` (its --timeout). Default 10m.
	KubectlTimeout time.Duration
	// Out receives progress lines; nil discards them.
	Out io.Writer
}

func (s *Setup) defaults() {
	if s.Nodes == 0 {
		s.Nodes = 4
	}
	if s.Drain == 0 {
		s.Drain = 2
	}
	if s.Replicas == 0 {
		s.Replicas = 8
	}
	if s.Rate == 0 {
		s.Rate = 200
	}
	if s.Lag == 0 {
		s.Lag = time.Second
	}
	if s.Settle == 0 {
		s.Settle = 2 * time.Second
	}
	if s.Out == nil {
		s.Out = io.Discard
	}
	if s.KubectlTimeout == 0 {
		s.KubectlTimeout = 10 * time.Minute
	}
}

// Result is what one scenario run measured.
type Result struct {
	Scenario Scenario
	// Requests during the drain and for the balancer's lag after it.
	Requests traffic.Stats
	// DrainTime is from the drain's start to every drained node empty (for
	// vacate, every NodeDrain Drained; for kubectl, its exit).
	DrainTime time.Duration
	// Evicted is how many pods left the drained nodes.
	Evicted int
	// ReadyAfter is, for each replacement pod, the time from its creation
	// (seen by a watch) to Ready (seen by the same watch).
	ReadyAfter []time.Duration
}

// Run runs one scenario on fresh nodes; run numbers the scenario runs of a
// Setup, so nodes and pod ranges never repeat.
func Run(ctx context.Context, s Setup, sc Scenario, run int) (res Result, err error) {
	s.defaults()
	res.Scenario = sc
	cs := s.Cluster.Client
	prefix := fmt.Sprintf("sd%d", run)
	first, err := podCIDR(s.Network.Prefix(), run*s.Nodes)
	if err != nil {
		return res, err
	}
	sel := map[string]string{"servedrain.vacate.dev/run": prefix}
	nodes, err := devcluster.CreateNodes(ctx, cs, devcluster.NodeSet{Prefix: prefix, Count: s.Nodes, Labels: sel, PodCIDR: first})
	if err != nil {
		return res, err
	}
	defer deleteNodes(cs, nodes)
	if err := devcluster.WaitForNodesReady(ctx, cs, nodes, time.Minute); err != nil {
		return res, err
	}
	ns, err := devcluster.CreateNamespace(ctx, cs, prefix+"-")
	if err != nil {
		return res, err
	}
	kubelet, err := traffic.StartKubelet(ctx, cs, s.Network, ns, traffic.KubeletOptions{PreStopSleep: sc.PreStop, Spares: int(s.Replicas) / 2})
	if err != nil {
		return res, err
	}
	defer func() {
		kubelet.Stop()
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = traffic.ReleasePods(cctx, cs, ns)
		_ = cs.CoreV1().Namespaces().Delete(cctx, ns, metav1.DeleteOptions{})
	}()
	w := traffic.Workload{Namespace: ns, Name: "web", Replicas: s.Replicas, NodeSelector: sel, ReadinessGate: sc.Gate,
		GracePeriod: max(sc.PreStop+5*time.Second, 5*time.Second), PDB: s.PDB}
	if err := traffic.CreateWorkload(ctx, cs, w); err != nil {
		return res, err
	}
	if _, err := traffic.WaitForEndpoints(ctx, cs, ns, w.Name, int(s.Replicas), 2*time.Minute); err != nil {
		return res, err
	}
	if s.PDB != "none" {
		if _, err := devcluster.WaitForPDB(ctx, cs, ns, w.Name, s.Replicas, time.Minute); err != nil {
			return res, err
		}
	}
	// kwok marks a pod Ready as it gives it its IP; its server may still be
	// starting. The measurement starts once every server listens.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return kubelet.Running() >= int(s.Replicas), nil
	}); err != nil {
		return res, fmt.Errorf("waiting for the %d servers (%d running): %w", s.Replicas, kubelet.Running(), err)
	}
	targets, onTargets, err := busiest(ctx, s.Cluster, ns, nodes, s.Drain)
	if err != nil {
		return res, err
	}
	lb := traffic.StartBalancer(ctx, cs, s.Network, ns, w.Name, traffic.BalancerOptions{Rate: s.Rate, Lag: s.Lag})
	defer lb.Stop()
	ready, stopWatch := watchReadiness(cs, ns)
	defer stopWatch()
	// Steady traffic first: the window measured starts from a balancer
	// that routes to every endpoint.
	if err := sleep(ctx, 2*s.Lag); err != nil {
		return res, err
	}
	before := lb.Stats()
	if before.Lost() > 0 {
		return res, fmt.Errorf("steady traffic lost %d of %d requests before the drain (%d servers running): %s",
			before.Lost(), before.Sent, kubelet.Running(), strings.Join(before.Errors, "; "))
	}
	fmt.Fprintf(s.Out, "[%s] draining %s (%d pods of web there) under %.0f requests/s\n", sc, strings.Join(targets, ", "), onTargets, s.Rate)
	began := time.Now()
	switch sc.Drainer {
	case Kubectl:
		err = kubectlDrain(ctx, s, targets)
	case Vacate:
		err = vacateDrain(ctx, s, sc, prefix, targets)
	}
	if err != nil {
		return res, err
	}
	res.DrainTime = time.Since(began)
	// Requests sent before the balancer learnt of the last change still
	// count: wait out its lag, and one more second.
	if err := sleep(ctx, s.Lag+time.Second); err != nil {
		return res, err
	}
	res.Requests = lb.Stats().Since(before)
	res.Evicted = onTargets
	res.ReadyAfter = ready(began)
	if errs := kubelet.Errors(); len(errs) > 0 {
		return res, fmt.Errorf("the kubelet stand-in failed: %s", strings.Join(errs, "; "))
	}
	return res, nil
}

// podCIDR is the block-th /24 of prefix.
func podCIDR(prefix netip.Prefix, block int) (string, error) {
	if prefix.Bits() > 16 || block > 250 {
		return "", fmt.Errorf("network %s has no /24 number %d for pods (a /16 holds 250 besides its link)", prefix, block)
	}
	a := prefix.Masked().Addr().As4()
	a[2] = byte(block)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24).String(), nil
}

// busiest are the count nodes with the most of the namespace's pods (the
// first of equals), and how many pods they hold.
func busiest(ctx context.Context, c *devcluster.Cluster, ns string, nodes []string, count int) ([]string, int, error) {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	on := map[string]int{}
	for _, p := range pods.Items {
		on[p.Spec.NodeName]++
	}
	sorted := slices.Clone(nodes)
	slices.SortStableFunc(sorted, func(a, b string) int { return on[b] - on[a] })
	n := 0
	for _, node := range sorted[:count] {
		n += on[node]
	}
	return sorted[:count], n, nil
}

func kubectlDrain(ctx context.Context, s Setup, nodes []string) error {
	args := append([]string{"--kubeconfig", s.Cluster.Kubeconfig, "drain"}, nodes...)
	args = append(args, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout="+s.KubectlTimeout.String())
	out, err := exec.CommandContext(ctx, s.Kubectl, args...).CombinedOutput()
	if err != nil {
		return &KubectlError{Err: err, Output: string(out)}
	}
	return nil
}

// KubectlError is `kubectl drain` failing (a PDB that never allows the
// eviction makes it time out), with what it printed.
type KubectlError struct {
	Err    error
	Output string
}

func (e *KubectlError) Error() string {
	return fmt.Sprintf("kubectl drain: %v\n%s", e.Err, e.Output)
}

// vacateDrain drains the nodes at once under a policy of their own, with
// no batch window (the drains are requested together anyway).
func vacateDrain(ctx context.Context, s Setup, sc Scenario, name string, nodes []string) error {
	all := intstr.FromInt32(int32(len(nodes)))
	pol := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.DrainPolicySpec{
		Concurrency: v1alpha1.Concurrency{MaxParallelNodes: &all, BatchWindow: &metav1.Duration{}},
		Endpoints:   v1alpha1.Endpoints{SettleTime: &metav1.Duration{Duration: s.Settle}},
	}}
	if sc.Surge {
		pol.Spec.Surge.Pods = v1alpha1.SurgeAll
	}
	if err := s.Client.Create(ctx, pol); err != nil {
		return fmt.Errorf("creating DrainPolicy %s: %w", name, err)
	}
	defer func() { _ = s.Client.Delete(context.Background(), pol) }()
	for _, n := range nodes {
		nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: v1alpha1.NodeDrainSpec{NodeName: n, PolicyName: name, Requesters: []v1alpha1.Requester{{Name: "bench:servedrain"}}}}
		if err := s.Client.Create(ctx, nd); err != nil {
			return fmt.Errorf("creating NodeDrain %s: %w", n, err)
		}
	}
	defer func() {
		for _, n := range nodes {
			_ = s.Client.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
	}()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			nd := &v1alpha1.NodeDrain{}
			if err := s.Client.Get(ctx, client.ObjectKey{Name: n}, nd); err != nil {
				return false, err
			}
			switch nd.Status.Phase {
			case v1alpha1.PhaseDrained:
			case v1alpha1.PhaseFailed:
				return false, fmt.Errorf("the drain of %s failed", n)
			default:
				return false, nil
			}
		}
		return true, nil
	})
}

// watchReadiness records, for pods created after a moment, the time from
// their creation to Ready, both as a watch sees them.
func watchReadiness(cs kubernetes.Interface, ns string) (since func(time.Time) []time.Duration, stop func()) {
	var mu sync.Mutex
	created, ready := map[string]time.Time{}, map[string]time.Time{}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, ok := created[p.Name]; !ok {
			created[p.Name] = now
		}
		if _, ok := ready[p.Name]; !ok && devcluster.PodReady(p) {
			ready[p.Name] = now
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }})
	ch := make(chan struct{})
	f.Start(ch)
	f.WaitForCacheSync(ch)
	return func(t time.Time) []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			var out []time.Duration
			for name, c := range created {
				if r, ok := ready[name]; ok && c.After(t) {
					out = append(out, r.Sub(c))
				}
			}
			slices.Sort(out)
			return out
		}, func() {
			close(ch)
			f.Shutdown()
		}
}

func deleteNodes(cs kubernetes.Interface, nodes []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range nodes {
		_ = cs.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
