package traffic_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
)

func TestMain(m *testing.M) {
	// The Kubelet's servers are this test binary, re-executed.
	traffic.MaybeServe()
	os.Exit(testenv.Main(m))
}

const testLabel = "vacate.dev/test"

// needRoot skips where network namespaces cannot be made.
func needRoot(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux: it creates network namespaces")
	}
}

// TestNetwork: a server in the namespace is reachable from the host on any
// address of the prefix, an address with no server refuses at once (as in
// a cluster), nothing outside the prefix is served, and Close leaves
// nothing behind, also when a crashed run left the namespace.
func TestNetwork(t *testing.T) {
	needRoot(t)
	t.Parallel()
	ctx := testenv.Context(t)
	prefix := netip.MustParsePrefix("10.213.0.0/16")
	const name = "vacate-traffic-net"

	t.Log("creating the network twice, as a run after a crash would: the second replaces the first")
	if _, err := traffic.NewNetwork(name, prefix); err != nil {
		t.Fatal(err)
	}
	n, err := traffic.NewNetwork(name, prefix)
	if err != nil {
		t.Fatalf("creating the network over a leftover one: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })

	for _, a := range []string{"10.213.0.1", "10.213.255.0"} {
		if !n.Contains(netip.MustParseAddr(a)) {
			t.Errorf("Contains(%s) = false, want a pod address", a)
		}
	}
	for _, a := range []string{"10.213.255.253", "10.213.255.254", "10.214.0.1", "127.0.0.1"} {
		if n.Contains(netip.MustParseAddr(a)) {
			t.Errorf("Contains(%s) = true, want false (the host link or outside the prefix)", a)
		}
	}
	if _, err := n.StartServer(ctx, "outside", netip.MustParseAddrPort("10.214.0.1:8080"), 0); err == nil {
		t.Error("a server outside the prefix started, want an error")
	}

	t.Log("starting servers on the prefix's first address (kwok's first pod IP) and on another")
	var servers []*traffic.Server
	for _, a := range []string{"10.213.0.0:8080", "10.213.7.9:8080"} {
		s, err := n.StartServer(ctx, "pod-"+a, netip.MustParseAddrPort(a), 0)
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
		if got, err := get(a); err != nil || got != "pod-"+a {
			t.Errorf("GET %s from the host: %q, %v; want the pod's name", a, got, err)
		}
	}
	if _, err := get("10.213.1.1:8080"); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("GET an address with no server: %v, want connection refused", err)
	}

	t.Log("SIGTERM with no preStop sleep: the server exits and refuses at once")
	start := time.Now()
	if err := servers[0].Terminate(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("the server exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if _, err := get("10.213.0.0:8080"); err == nil {
		t.Error("the terminated server still answers")
	}
	servers[1].Kill()

	t.Log("closing the network, twice")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("closing again: %v", err)
	}
	if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
		t.Errorf("the namespace is still there: %v", err)
	}
	out, err := exec.Command("ip", "-o", "route", "show", "table", "all", "root", prefix.String()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("host routes into %s after Close: %q, %v", prefix, out, err)
	}
	out, err = exec.Command("ip", "-o", "addr", "show", "to", prefix.String()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("host addresses in %s after Close (the veth link): %q, %v", prefix, out, err)
	}
}

// TestDetectsDroppedRequests shows that the harness sees the race issue 15
// is about: a pod deleted with no gate stops listening at once, while the
// load balancer keeps sending to it until it has applied the EndpointSlice
// change, and those requests fail.
func TestDetectsDroppedRequests(t *testing.T) {
	needRoot(t)
	// Not parallel: two fleets of race-built servers under traffic starve a
	// 2-core CI machine into timeouts that are not the race measured here.
	r := startRig(t, "drop", netip.MustParsePrefix("10.214.0.0/16"), traffic.KubeletOptions{})

	b, steady := r.steadyTraffic(t)
	victim := r.pods[0]
	t.Logf("deleting pod %s (%s) with no gate: its server stops listening at once, the balancer learns of it a second later",
		victim.Name, victim.Status.PodIP)
	took := r.deletePod(t, victim)
	t.Logf("the pod was gone %s after its deletion", took.Round(time.Millisecond))
	r.waitReplaced(t, b)

	after := b.Stats().Since(steady)
	t.Logf("after the deletion: %s", after)
	for _, e := range after.Errors {
		t.Logf("  %s", e)
	}
	if after.Failed == 0 {
		t.Error("no request failed: the harness cannot see a drop")
	}
	if after.NoBackend != 0 {
		t.Errorf("%d requests found no backend with 3 of 4 pods ready", after.NoBackend)
	}
	for _, e := range after.Errors {
		if !strings.Contains(e, victim.Status.PodIP+":") {
			t.Errorf("a failure not on the deleted pod's address %s: %s", victim.Status.PodIP, e)
		}
	}
}

// TestPreStopSleepDropsNothing: with a preStop sleep longer than the load
// balancer's lag the deleted pod keeps serving until no request goes to
// it, so nothing fails, and the pod stays Terminating until its process
// has exited, as with a real kubelet.
func TestPreStopSleepDropsNothing(t *testing.T) {
	needRoot(t)
	// Not parallel: two fleets of race-built servers under traffic starve a
	// 2-core CI machine into timeouts that are not the race measured here.
	const preStop = 2 * time.Second
	r := startRig(t, "prestop", netip.MustParsePrefix("10.215.0.0/16"), traffic.KubeletOptions{PreStopSleep: preStop})

	b, steady := r.steadyTraffic(t)
	victim := r.pods[0]
	t.Logf("deleting pod %s (%s); its server keeps serving %s after SIGTERM", victim.Name, victim.Status.PodIP, preStop)
	terminating := make(chan error, 1)
	deleted := time.Now()
	go func() {
		time.Sleep(preStop / 2)
		late := time.Since(deleted) >= preStop // a loaded machine woke this up too late to tell
		p, err := r.cs.CoreV1().Pods(r.ns).Get(context.Background(), victim.Name, metav1.GetOptions{})
		switch {
		case late:
			terminating <- nil
		case err != nil:
			terminating <- err
		case p.UID != victim.UID || p.DeletionTimestamp == nil:
			terminating <- fmt.Errorf("pod %s at %s: uid %s, deletionTimestamp %v; want the same pod, Terminating", victim.Name, preStop/2, p.UID, p.DeletionTimestamp)
		default:
			terminating <- nil
		}
	}()
	took := r.deletePod(t, victim)
	t.Logf("the pod was gone %s after its deletion", took.Round(time.Millisecond))
	if err := <-terminating; err != nil {
		t.Errorf("while its server still ran: %v", err)
	}
	if took < preStop {
		t.Errorf("the pod was gone after %s, before its server's preStop sleep of %s ended", took, preStop)
	}
	r.waitReplaced(t, b)

	after := b.Stats().Since(steady)
	t.Logf("after the deletion: %s", after)
	if after.Lost() != 0 {
		t.Errorf("%d requests lost, want none: %v", after.Lost(), after.Errors)
	}
}

// rig is a served Workload on two nodes whose pods live in a Network.
type rig struct {
	cs      kubernetes.Interface
	ns      string
	net     *traffic.Network
	kubelet *traffic.Kubelet
	pods    []corev1.Pod
}

// startRig creates the Network, two nodes with pod CIDRs in it, a Kubelet
// and a 4-replica Workload "web", and waits until all four serve.
func startRig(t *testing.T, name string, prefix netip.Prefix, opts traffic.KubeletOptions) *rig {
	t.Helper()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	n, err := traffic.NewNetwork("vacate-traffic-"+name, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	firstCIDR := netip.PrefixFrom(prefix.Addr(), 24)
	t.Logf("creating network %s (%s) and 2 nodes with pod CIDRs from %s", n.Name(), prefix, firstCIDR)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "traffic-" + name, Count: 2,
		PodCIDR: firstCIDR.String(), Labels: map[string]string{testLabel: name}})
	cidrs := map[string]netip.Prefix{}
	for _, node := range nodes {
		nd, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cidrs[node] = netip.MustParsePrefix(nd.Spec.PodCIDR)
	}
	t.Logf("node pod CIDRs: %v", cidrs)
	ns := testenv.Namespace(t, c)
	k, err := traffic.StartKubelet(ctx, c.Client, n, ns, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Stop()
		if err := traffic.ReleasePods(context.Background(), c.Client, ns); err != nil {
			t.Error(err)
		}
		for _, e := range k.Errors() {
			t.Errorf("kubelet stand-in: %s", e)
		}
	})
	r := &rig{cs: c.Client, ns: ns, net: n, kubelet: k}

	t.Log("creating Deployment, Service and PDB web with 4 replicas served by the kubelet stand-in")
	if err := traffic.CreateWorkload(ctx, c.Client, traffic.Workload{Namespace: ns, Name: "web", Replicas: 4,
		NodeSelector: map[string]string{testLabel: name}}); err != nil {
		t.Fatal(err)
	}
	if _, err := traffic.WaitForEndpoints(ctx, c.Client, ns, "web", 4, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	r.waitRunning(t, 4)
	r.pods, err = devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.pods {
		ip := netip.MustParseAddr(p.Status.PodIP)
		if !cidrs[p.Spec.NodeName].Contains(ip) {
			t.Errorf("pod %s on %s has IP %s, want one in the node's pod CIDR %s", p.Name, p.Spec.NodeName, ip, cidrs[p.Spec.NodeName])
		}
	}
	return r
}

// steadyTraffic starts a Balancer at 200 requests a second and checks that
// nothing fails for two seconds while every pod serves.
func (r *rig) steadyTraffic(t *testing.T) (*traffic.Balancer, traffic.Stats) {
	t.Helper()
	b := traffic.StartBalancer(testenv.Context(t), r.cs, r.net, r.ns, "web", traffic.BalancerOptions{Rate: 100, Lag: time.Second})
	t.Cleanup(func() { t.Logf("balancer, in all: %s", b.Stop()) })
	if got := len(b.Backends()); got != 4 {
		t.Fatalf("the balancer routes to %d endpoints, want 4", got)
	}
	// 150 answered requests, however long a loaded machine takes to
	// answer them, and none lost meanwhile.
	var steady traffic.Stats
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		steady = b.Stats()
		return steady.Lost() != 0 || steady.OK >= 150, nil
	})
	t.Logf("steady: %s", steady)
	if err != nil || steady.Lost() != 0 {
		t.Fatalf("steady traffic: %s, want 150 ok and none lost: %v (%v)", steady, steady.Errors, err)
	}
	return b, steady
}

// deletePod deletes p as a user or a drain would (default grace period)
// and returns how long until it was gone.
func (r *rig) deletePod(t *testing.T, p corev1.Pod) time.Duration {
	t.Helper()
	ctx := testenv.Context(t)
	start := time.Now()
	if err := r.cs.CoreV1().Pods(r.ns).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(p.UID))}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s not gone after its deletion: %v", p.Name, err)
	}
	return time.Since(start)
}

// waitReplaced waits until the replacement pod serves and the balancer
// routes to all four endpoints, so that every failure the deletion caused
// has been counted.
func (r *rig) waitReplaced(t *testing.T, b *traffic.Balancer) {
	t.Helper()
	ctx := testenv.Context(t)
	ready, err := traffic.WaitForEndpoints(ctx, r.cs, r.ns, "web", 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r.waitRunning(t, 4)
	// The balancer applies what it saw a second ago (its Lag).
	var got []netip.Addr
	testutil.Eventually(t, time.Minute, "the balancer to route to the ready endpoints", func() error {
		got = got[:0]
		for _, ap := range b.Backends() {
			got = append(got, ap.Addr())
		}
		if fmt.Sprint(got) != fmt.Sprint(ready) {
			return fmt.Errorf("the balancer routes to %v, want the ready endpoints %v", got, ready)
		}
		return nil
	})
}

func (r *rig) waitRunning(t *testing.T, want int) {
	t.Helper()
	testutil.Eventually(t, time.Minute, fmt.Sprintf("%d servers running", want), func() error {
		if got := r.kubelet.Running(); got != want {
			return fmt.Errorf("%d servers running, want %d; kubelet errors: %v", got, want, r.kubelet.Errors())
		}
		return nil
	})
}

// get fetches http://addr/ from the host.
func get(addr string) (string, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
