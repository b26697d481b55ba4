package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/examples/broker"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/requests"
)

// Fixed names these tests check, spelled out so the tests also build on
// code from before they existed.
const (
	finalizerNodeDrain = "vacate.dev/drain" // on Nodes, with onNodeDelete: Drain
	blockerHTTPHook    = "HTTPHook"
	blockerPDB         = "PodDisruptionBudget"
	safetyMessages     = 300
)

// served is a broker run in the test process on its pod's IP, behind a
// handler that records the hook calls it gets and can refuse its peers'
// messages (holding their forwarding mid-way).
type served struct {
	name, url string
	b         *broker.Broker
	h         http.Handler

	mu     sync.Mutex
	calls  []string // hook calls: "POST Maintenance", "GET", "DELETE", ...
	refuse bool
}

func (s *served) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if r.URL.Path == "/evacuate" {
		call := r.Method
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct{ Mode string }
			_ = json.Unmarshal(body, &req)
			call += " " + req.Mode
		}
		s.calls = append(s.calls, call)
	}
	refuse := s.refuse && r.URL.Path == "/accept"
	s.mu.Unlock()
	if refuse {
		http.Error(w, "the test holds this peer", http.StatusServiceUnavailable)
		return
	}
	s.h.ServeHTTP(w, r)
}

// hookCalls are the hook calls so far.
func (s *served) hookCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *served) refusePeers(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = on
}

func (s *served) proc() *brokerProc { return &brokerProc{name: s.name, url: s.url} }

// brokers are three brokers, one per node of a pool, each in a pod of its
// own Deployment with the HTTP hook annotations, under a DrainPolicy that
// allows HTTP hooks.
type brokers struct {
	c      *devcluster.Cluster
	cl     client.Client
	ns     string
	nodes  []string
	pods   []corev1.Pod
	served []*served
}

func startBrokers(t *testing.T, pool string, triggers v1alpha1.Triggers, tune ...func(*v1alpha1.DrainPolicySpec)) *brokers {
	t.Helper()
	c := testenv.Start(t)
	e := &brokers{c: c, cl: testenv.Controller(t, c), ns: testenv.Namespace(t, c)}
	ctx := testenv.Context(t)
	e.nodes = testenv.Nodes(t, c, devcluster.NodeSet{Prefix: pool, Count: 3, Labels: map[string]string{"pool": pool}})
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(1))},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
		Triggers:     triggers,
	}}
	for _, f := range tune {
		f(&dp.Spec)
	}
	if err := e.cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), dp) })
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, e.ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.pods = make([]corev1.Pod, len(e.nodes))
	for i, n := range e.nodes {
		d := devcluster.Deployment(e.ns, fmt.Sprintf("broker-%d", i), 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: n}
		d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
		if _, err := c.Client.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ready, err := devcluster.WaitForPodsReady(ctx, c.Client, e.ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: d.Name}), 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		e.pods[i] = ready[0]
	}
	for i := range e.nodes {
		var peers []string
		for j := range e.nodes {
			if j != i {
				peers = append(peers, fmt.Sprintf("http://%s:%d", e.pods[j].Status.PodIP, port))
			}
		}
		// Broker 0 forwards slowly enough to be held mid-way.
		b := &broker.Broker{Name: fmt.Sprintf("broker-%d", i), Dir: t.TempDir(), Peers: peers, NoSync: true}
		if i == 0 {
			b.ForwardDelay = 10 * time.Millisecond
		}
		e.served = append(e.served, serve(t, b, e.pods[i].Status.PodIP))
	}
	return e
}

// serve runs b on ip:port until the test ends.
func serve(t *testing.T, b *broker.Broker, ip string) *served {
	t.Helper()
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	s := &served{name: b.Name, url: fmt.Sprintf("http://%s:%d", ip, port), b: b, h: b.Handler()}
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// publishN publishes n messages round robin and returns the bodies by id.
func (e *brokers) publishN(t *testing.T, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range n {
		body := fmt.Sprintf("order %d", i)
		resp, err := http.Post(e.served[i%len(e.served)].url+"/publish", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var ans struct{ ID string }
		err = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if err != nil || ans.ID == "" {
			t.Fatalf("publish %d: %v", i, err)
		}
		out[ans.ID] = body
	}
	return out
}

// checkEveryMessageOnce consumes every broker and fails the test for each
// message lost, duplicated or changed.
func (e *brokers) checkEveryMessageOnce(t *testing.T, published map[string]string) {
	t.Helper()
	procs := make([]*brokerProc, 0, len(e.served))
	for _, s := range e.served {
		procs = append(procs, s.proc())
	}
	checkEveryMessageOnce(t, published, procs)
}

// evictionSeen records what broker-0 held when its pod started
// terminating; empty while it has not.
type evictionSeen struct {
	mu   sync.Mutex
	with string
}

func (e *brokers) watchBroker0(t *testing.T) *evictionSeen {
	t.Helper()
	seen := &evictionSeen{}
	watchEviction(t, e.c, e.ns, e.pods[0].Name, func() {
		s, err := e.served[0].proc().stats()
		seen.mu.Lock()
		defer seen.mu.Unlock()
		seen.with = fmt.Sprintf("%d stored (%v)", s.Stored, err)
	})
	return seen
}

func (s *evictionSeen) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.with
}

// waitDrain polls the NodeDrain until cond holds, failing at once if
// broker-0's pod left.
func (e *brokers) waitDrain(t *testing.T, seen *evictionSeen, what string, cond func(*v1alpha1.NodeDrain) bool) *v1alpha1.NodeDrain {
	t.Helper()
	ctx := testenv.Context(t)
	nd := &v1alpha1.NodeDrain{}
	testutil.Eventually(t, time.Minute, fmt.Sprintf("the drain of %s to be %s", e.nodes[0], what), func() error {
		if seen.get() != "" {
			return nil
		}
		if e.cl.Get(ctx, types.NamespacedName{Name: e.nodes[0]}, nd) == nil && cond(nd) {
			return nil
		}
		return fmt.Errorf("mode %s, phase %s, hooks %+v, blockers %+v", nd.Spec.Mode, nd.Status.Phase, nd.Status.Hooks, nd.Status.Blockers)
	})
	if s := seen.get(); s != "" {
		t.Fatalf("waiting for the drain to be %s: broker-0's pod was evicted while broker-0 held %s", what, s)
	}
	return nd
}

// checkBroker0Stays: broker-0's pod is still on its node, not terminating.
func (e *brokers) checkBroker0Stays(t *testing.T, seen *evictionSeen, when string) {
	t.Helper()
	if s := seen.get(); s != "" {
		t.Fatalf("%s: broker-0's pod was evicted while broker-0 held %s", when, s)
	}
	p, err := e.c.Client.CoreV1().Pods(e.ns).Get(testenv.Context(t), e.pods[0].Name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("%s: broker-0's pod is gone or terminating (%v)", when, err)
	}
}

// TestBrokerNodeDeletionRaisesToDecommission (issue 11): a person's
// Maintenance drain (requester cli:x) of a broker's node, under a policy
// with onNodeDelete: Drain. The node is deleted while the broker forwards
// its messages: the drain is raised to Decommission, the broker is told so,
// its pod stays until every message is on a peer, and then the node is
// released. No message is lost or duplicated.
func TestBrokerNodeDeletionRaisesToDecommission(t *testing.T) {
	e := startBrokers(t, "brkdel", v1alpha1.Triggers{OnNodeDelete: "Drain"})
	ctx := testenv.Context(t)
	target := e.nodes[0]
	e.waitNodeFinalizer(t)
	published := e.publishN(t, safetyMessages)
	b0 := e.served[0]
	before, err := b0.proc().stats()
	if err != nil || before.Stored == 0 {
		t.Fatalf("broker-0 holds no message (%+v, %v)", before, err)
	}
	seen := e.watchBroker0(t)

	if err := requests.Apply(ctx, e.cl, target, v1alpha1.Requester{Name: "cli:x", Reason: "kernel upgrade"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		s, err := b0.proc().stats()
		return err == nil && s.Stored < before.Stored && s.Stored > 0, nil
	})
	if err != nil {
		t.Fatal("broker-0 never got under way forwarding")
	}
	for _, s := range e.served[1:] {
		s.refusePeers(true)
	}
	held, _ := b0.proc().stats()
	t.Logf("the peers refuse broker-0's messages: %d of %d still on broker-0", held.Stored, before.Stored)

	t.Log("the node is deleted mid-way")
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, seen, "raised to Decommission", func(nd *v1alpha1.NodeDrain) bool {
		return nd.Spec.Mode == v1alpha1.ModeDecommission && requests.Index(nd, "cli:x") >= 0
	})
	// The broker is told (POST with the new mode) and polled again while
	// its pod is held.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		calls := b0.hookCalls()
		i := slices.Index(calls, http.MethodPost+" "+string(v1alpha1.ModeDecommission))
		return seen.get() != "" || (i >= 0 && slices.ContainsFunc(calls[i+1:], func(c string) bool { return c == http.MethodGet })), nil
	})
	e.checkBroker0Stays(t, seen, "after the node's deletion")
	if err != nil {
		t.Errorf("broker-0 was never told the drain is a Decommission: hook calls %v", b0.hookCalls())
	}
	e.waitDrain(t, seen, "holding broker-0's pod for its hook", func(nd *v1alpha1.NodeDrain) bool {
		return slices.ContainsFunc(nd.Status.Blockers, func(b v1alpha1.Blocker) bool {
			return b.Reason == blockerHTTPHook && b.Pod == e.ns+"/"+e.pods[0].Name
		})
	})
	if _, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{}); err != nil {
		t.Fatalf("node %s was released while broker-0 still held messages: %v", target, err)
	}

	e.finishDecommission(t, seen, published)
}

// waitNodeFinalizer waits until broker-0's node carries the finalizer of
// onNodeDelete: Drain.
func (e *brokers) waitNodeFinalizer(t *testing.T) {
	t.Helper()
	ctx := testenv.Context(t)
	testutil.Eventually(t, time.Minute, fmt.Sprintf("node %s to get the finalizer %s", e.nodes[0], finalizerNodeDrain), testutil.Holds(func() bool {
		node, err := e.c.Client.CoreV1().Nodes().Get(ctx, e.nodes[0], metav1.GetOptions{})
		return err == nil && controllerutil.ContainsFinalizer(node, finalizerNodeDrain)
	}))
}

// finishDecommission lets the peers take broker-0's messages again: broker-0
// finishes, its pod goes, then its deleted node, whose drain is Drained in
// Decommission; every message is consumed once.
func (e *brokers) finishDecommission(t *testing.T, seen *evictionSeen, published map[string]string) {
	t.Helper()
	ctx := testenv.Context(t)
	target, b0 := e.nodes[0], e.served[0]
	t.Log("the peers take messages again: broker-0 finishes, its pod goes, then the node")
	for _, s := range e.served[1:] {
		s.refusePeers(false)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("deleted node %s was never released", target)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: target}, nd); err != nil {
		t.Fatal(err)
	}
	if nd.Spec.Mode != v1alpha1.ModeDecommission || nd.Status.Mode != v1alpha1.ModeDecommission || nd.Status.Phase != v1alpha1.PhaseDrained {
		t.Errorf("the drain of the deleted node: spec.mode %s, status.mode %s, phase %s; want Drained in Decommission", nd.Spec.Mode, nd.Status.Mode, nd.Status.Phase)
	}
	if s := seen.get(); !strings.HasPrefix(s, "0 stored") {
		t.Errorf("broker-0's pod was evicted while broker-0 held %q", s)
	}
	t.Logf("broker-0's hook calls: %s", compact(b0.hookCalls()))
	e.checkEveryMessageOnce(t, published)
}

// TestBrokerCancelAfterDecommissionEvacuation (issue 11): a Decommission
// drain of a broker's node whose hook answered Completed (every message on
// a peer) while a PDB keeps the pod, is cancelled (the NodeDrain deleted)
// while the node stays. The broker is not asked to cancel: its messages
// stay moved; none is lost or duplicated; the node is uncordoned.
func TestBrokerCancelAfterDecommissionEvacuation(t *testing.T) {
	e := startBrokers(t, "brkcancel", v1alpha1.Triggers{})
	ctx := testenv.Context(t)
	target := e.nodes[0]
	pdb := devcluster.PDB(e.ns, "broker-0", "broker-0", "", "0")
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, e.c.Client, e.ns, pdb.Name, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	published := e.publishN(t, safetyMessages)
	b0 := e.served[0]
	seen := e.watchBroker0(t)

	if err := requests.Apply(ctx, e.cl, target, v1alpha1.Requester{Name: "cli:x", Reason: "retire"}, v1alpha1.ModeDecommission, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	hookName := "pod/" + e.ns + "/" + e.pods[0].Name
	e.waitDrain(t, seen, "evacuated, with broker-0's pod kept by its PDB", func(nd *v1alpha1.NodeDrain) bool {
		completed := slices.ContainsFunc(nd.Status.Hooks, func(h v1alpha1.HookStatus) bool {
			return h.Name == hookName && h.Phase == string(v1alpha1.EvacuationCompleted)
		})
		pdbBlocks := slices.ContainsFunc(nd.Status.Blockers, func(b v1alpha1.Blocker) bool {
			return b.Reason == blockerPDB && b.Pod == e.ns+"/"+e.pods[0].Name
		})
		return completed && pdbBlocks
	})
	if s, err := b0.proc().stats(); err != nil || s.Stored != 0 || !s.Evacuating {
		t.Fatalf("broker-0 after its Completed evacuation: %+v, %v; want 0 stored, evacuating", s, err)
	}

	t.Log("the drain is cancelled: the NodeDrain is deleted; the node stays")
	if err := e.cl.Delete(ctx, &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: target}, &v1alpha1.NodeDrain{})), nil
	})
	if err != nil {
		t.Fatal("the cancelled drain was never undone")
	}
	calls := b0.hookCalls()
	t.Logf("broker-0's hook calls: %s", compact(calls))
	if slices.Contains(calls, http.MethodDelete) {
		t.Errorf("broker-0 was asked to cancel (DELETE) after its Decommission evacuation Completed: hook calls %s", compact(calls))
	}
	if s, err := b0.proc().stats(); err != nil || s.Stored != 0 || !s.Evacuating {
		t.Errorf("broker-0 after the cancel: %+v, %v; want 0 stored, still evacuated", s, err)
	}
	node, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil || node.Spec.Unschedulable {
		t.Errorf("node %s after the cancel: %v, unschedulable %v; want it back in service", target, err, node != nil && node.Spec.Unschedulable)
	}
	e.checkBroker0Stays(t, seen, "after the cancel")
	e.checkEveryMessageOnce(t, published)
}

// compact shortens a call log: runs of the same call are counted.
func compact(calls []string) string {
	var out []string
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j] == calls[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s x%d", calls[i], j-i))
		} else {
			out = append(out, calls[i])
		}
		i = j
	}
	return strings.Join(out, ", ")
}
