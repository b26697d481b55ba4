package nodedrain_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
)

// podRequests watches the controller's requests for pods: it holds the
// first list of one node's pods back (the node's scope of the pod cache
// warming up, as on a loaded API server), and records every list and watch
// of pods and every eviction.
type podRequests struct {
	ns   string
	node string
	hold time.Duration

	mu        sync.Mutex
	held      int
	unscoped  []string
	evictions map[string]int
}

func (p *podRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		pod := p.see(req)
		resp, err := rt.RoundTrip(req)
		if pod != "" && err == nil && resp.StatusCode < 300 {
			p.mu.Lock()
			p.evictions[pod]++
			p.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// see records a list or watch of pods, holding the first list of the
// node's back, and returns the pod an eviction is of.
func (p *podRequests) see(req *http.Request) (evicted string) {
	path := req.URL.Path
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if req.Method == http.MethodPost && len(parts) == 7 && parts[3] == p.ns && parts[4] == "pods" && parts[6] == "eviction" {
		return parts[5]
	}
	// A list or watch of pods: /api/v1/pods or /api/v1/namespaces/NS/pods.
	if req.Method != http.MethodGet || !(path == "/api/v1/pods" || (len(parts) == 5 && parts[2] == "namespaces" && parts[4] == "pods")) {
		return ""
	}
	q := req.URL.Query()
	if q.Get("fieldSelector") == "" && q.Get("labelSelector") == "" {
		p.mu.Lock()
		p.unscoped = append(p.unscoped, req.Method+" "+req.URL.String())
		p.mu.Unlock()
	}
	// The first list of the node's pods: a list, or a watch that starts
	// with the pods there are (client-go's watch list).
	if (q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true") && q.Get("fieldSelector") == "spec.nodeName="+p.node {
		p.mu.Lock()
		first := p.held == 0
		p.held++
		p.mu.Unlock()
		if first {
			time.Sleep(p.hold)
		}
	}
	return ""
}

// TestDrainNeverActsOnAPartialView: the controller caches pods by scope,
// started when a drain first needs its node's. A drain created while its
// node's scope is still being listed (the list held back for seconds)
// waits for the whole list: every pod of the node is evicted once, the drain
// counts them all, no PDB is violated, and it is not declared drained
// while a pod remains. Throughout, the controller never lists or watches
// the cluster's pods without a selector.
func TestDrainNeverActsOnAPartialView(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cl := testenv.DrainClient(t, c)
	if err := devcluster.InstallControllerIdentity(ctx, c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{testLabel: "partial"}
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "partial", Count: 2, Labels: sel})
	target := nodes[0]
	ns := testenv.Namespace(t, c)

	spare := nodes[1]
	cordon := func(node string, on bool) {
		t.Helper()
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Unschedulable = on
		if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cordon(spare, true)
	const replicas = 12
	dep := devcluster.Deployment(ns, "web", replicas)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), replicas, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", replicas, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The pods' replacements go to the spare node.
	cordon(spare, false)
	guard := testenv.WatchPDBs(t, c, ns)

	watched := &podRequests{ns: ns, node: target, hold: 3 * time.Second, evictions: map[string]int{}}
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Wrap(watched.wrap)
	opts := operator.InProcessOptions()
	opts.Controllers.AllowLoopbackHooks = true
	stop, err := operator.Start(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})

	onNode := map[string]bool{}
	for _, p := range testenv.PodsOnNode(t, c, target) {
		onNode[p.Name] = true
	}
	nd := testutil.NodeDrain(target, "", "cli:test")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nd) })
	done := testenv.WaitForDrain(t, cl, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	}, testenv.DescribeDrain)

	if left := testenv.PodsOnNode(t, c, target); len(left) != 0 {
		t.Errorf("drained while %d pod(s) are still on the node", len(left))
	}
	if done.Status.Total != replicas || done.Status.Evicted != replicas {
		t.Errorf("the drain counts total %d, evicted %d; the node had %d pods: %s", done.Status.Total, done.Status.Evicted, replicas, testenv.DescribeDrain(done))
	}
	watched.mu.Lock()
	defer watched.mu.Unlock()
	if watched.held == 0 {
		t.Error("no list of the node's pods was seen: the test held nothing back")
	}
	for name := range onNode {
		if n := watched.evictions[name]; n != 1 {
			t.Errorf("pod %s: evicted %d time(s), want 1", name, n)
		}
	}
	for name, n := range watched.evictions {
		if !onNode[name] {
			t.Errorf("pod %s was not on the node, and was evicted %d time(s)", name, n)
		}
	}
	for _, u := range watched.unscoped {
		q, _ := url.QueryUnescape(u)
		t.Errorf("the controller read every pod of the cluster: %s", q)
	}
	guard.Check(t)
}

// TestLabelledPodsAreWatchedNotChanged: the controller watches pods outside
// drained nodes by the label vacate.dev/endpoint-aware=true. A pod with
// vacate's readiness gate and the label, on a node nobody drains, is made
// Ready; a tenant's pod that carries the label without the gate is watched
// too (created first, so its events come first) and never changed.
func TestLabelledPodsAreWatchedNotChanged(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "labelled", Count: 1})[0]
	ns := testenv.Namespace(t, e.c)
	decoy := devcluster.BarePod(ns, "decoy", node)
	decoy.Labels[v1alpha1.LabelEndpointAware] = "true"
	gated := devcluster.BarePod(ns, "gated", node)
	gated.Labels[v1alpha1.LabelEndpointAware] = "true"
	gated.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.ConditionServing}}
	for _, p := range []*corev1.Pod{decoy, gated} {
		if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "the gated pod's condition "+v1alpha1.ConditionServing+" True", func() error {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, gated.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1alpha1.ConditionServing && c.Status == corev1.ConditionTrue && changedByVacate(p) {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", p.Status.Conditions)
	})
	p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, decoy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1alpha1.ConditionServing {
			t.Errorf("the labelled pod without the gate got vacate's condition: %+v", c)
		}
	}
	if changedByVacate(p) {
		t.Errorf("vacate changed the labelled pod without the gate: %v", p.ManagedFields)
	}
}

// changedByVacate says whether the pod's managed fields name vacate's
// controller as a writer.
func changedByVacate(p *corev1.Pod) bool {
	for _, m := range p.ManagedFields {
		if strings.HasPrefix(m.Manager, "vacate-controller") {
			return true
		}
	}
	return false
}
