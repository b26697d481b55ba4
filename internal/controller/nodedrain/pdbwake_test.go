package nodedrain_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// passCounter counts the controller's reconcile passes per NodeDrain: a
// pass is a reconcile ID (controller-runtime puts one in each pass's
// context), named by the first NodeDrain it reads. Reads from watch
// handlers and the eviction guard carry no reconcile ID.
type passCounter struct {
	client.Client
	mu     sync.Mutex
	passes map[types.UID]string
}

func (c *passCounter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.NodeDrain); ok {
		if id := controller.ReconcileIDFromContext(ctx); id != "" {
			c.mu.Lock()
			if _, seen := c.passes[id]; !seen {
				c.passes[id] = key.Name
			}
			c.mu.Unlock()
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// countingPasses runs a controller of its own on the package's dev
// cluster, its passes counted.
func countingPasses(t *testing.T) (*env, *passCounter) {
	c := testenv.Start(t)
	counter := &passCounter{passes: map[types.UID]string{}}
	runSolo(t, c, solo{client: func(cl client.Client) client.Client { counter.Client = cl; return counter }})
	return &env{c: c, cl: testenv.DrainClient(t, c)}, counter
}

// of is how many passes the drain has had.
func (c *passCounter) of(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.passes {
		if d == name {
			n++
		}
	}
	return n
}

// TestPDBChangeWakesOnlyItsDrains: three drains, each blocked by its own
// PDB (maxUnavailable 0) over the pods of its node. PDB a's status changes
// again and again (its Deployment grows on a spare node) but never allows a
// disruption: no drain is woken by it, not even drain a, whose pods wait on
// it, since nothing it can do changed. Then PDB b allows a disruption:
// drain b notices and finishes, and drains a and c, which wait on other
// PDBs, sleep through PDB b's changes.
func TestPDBChangeWakesOnlyItsDrains(t *testing.T) {
	e, counter := countingPasses(t)
	c := e.c
	ctx := testenv.Context(t)
	cs := c.Client

	apps := []string{"a", "b", "c"}
	nodes, nsOf := pdbWakeScenario(t, e, apps)
	ns := nsOf["b"] // b's and c's
	guard := testenv.WatchPDBs(t, c, ns)

	for _, app := range apps {
		nd := testutil.NodeDrain(nodes[app], "", "cli:test")
		create(t, e, nd)
	}
	for _, app := range apps {
		e.waitDrain(t, nodes[app], "blocked by its PDB", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
			return meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionCordoned) &&
				meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionBlocked) && nd.Status.Blocked == 2
		})
	}

	const steps = 6
	passes := func() map[string]int {
		out := map[string]int{}
		for _, app := range apps {
			out[app] = counter.of(nodes[app])
		}
		return out
	}
	since := func(before map[string]int) map[string]int {
		out := map[string]int{}
		for app, n := range passes() {
			out[app] = n - before[app]
		}
		return out
	}
	before := passes()
	t.Logf("changing PDB a's status %d times (Deployment a grows on the spare node); passes so far: %v", steps, before)
	growUnderPDB(t, e, nsOf["a"], "a", steps)
	time.Sleep(2 * time.Second) // the passes a wrong mapping would cause are queued by now
	woken := since(before)
	t.Logf("passes while PDB a changed and allowed nothing: %v", woken)
	for _, app := range apps {
		// A resync or a node update may wake a drain once or twice meanwhile.
		if woken[app] >= steps/2 {
			t.Errorf("drain %s had %d passes while PDB a changed %d times and allowed no disruption", app, woken[app], steps)
		}
	}

	t.Log("relaxing PDB b: drain b must notice and finish")
	before = passes()
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, "b", types.MergePatchType, []byte(`{"spec":{"maxUnavailable":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, nodes["b"], "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	time.Sleep(2 * time.Second)
	woken = since(before)
	t.Logf("passes while drain b finished: %v", woken)
	if woken["b"] < 2 {
		t.Errorf("drain b had %d passes to evict its 2 pods", woken["b"])
	}
	for _, app := range []string{"a", "c"} {
		if woken[app] >= steps/2 {
			t.Errorf("drain %s had %d passes while PDB b, on which none of its pods waits, let drain b finish", app, woken[app])
		}
	}
	guard.Check(t)
}

// pdbWakeScenario makes, for each app, a node of its own under a policy of
// its own (so each drain is admitted alone) with the app's Deployment of
// two pods, guarded by the app's PDB allowing no disruption, and a spare
// node the Deployments may grow on. It returns the nodes and namespaces by
// app: a's namespace is its own, b and c share one.
func pdbWakeScenario(t *testing.T, e *env, apps []string) (nodes, nsOf map[string]string) {
	t.Helper()
	c, cs := e.c, e.c.Client
	ctx := testenv.Context(t)
	nodes = map[string]string{}
	spareLabels := map[string]string{}
	for _, app := range apps {
		pool := map[string]string{"pdbwake-" + app: "true"}
		nodes[app] = testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "pdbwake-" + app, Count: 1, Labels: pool})[0]
		spareLabels["pdbwake-"+app] = "true"
		// A policy of its own, so each drain is admitted on its own.
		create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pdbwake-" + app}, Spec: v1alpha1.DrainPolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{devcluster.HostnameLabel: nodes[app]}},
		}})
	}
	spare := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "pdbwake-spare", Count: 1, Labels: spareLabels})[0]
	updateNode(t, e, spare, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	// PDB a's Deployment grows below (not a disruption): it has a namespace
	// of its own, which the PDB guard does not watch.
	nsOf = map[string]string{"a": testenv.Namespace(t, c)}
	ns := testenv.Namespace(t, c)
	nsOf["b"], nsOf["c"] = ns, ns
	for _, app := range apps {
		ns := nsOf[app]
		dep := devcluster.Deployment(ns, app, 2)
		dep.Spec.Template.Spec.NodeSelector = map[string]string{"pdbwake-" + app: "true"}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, app, app, "", "0"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, app := range apps {
		ns := nsOf[app]
		if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: app}), 2, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := devcluster.WaitForPDB(ctx, cs, ns, app, 2, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	updateNode(t, e, spare, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	return nodes, nsOf
}

// growUnderPDB scales the Deployment app (guarded by the PDB app of the same
// pods) one replica at a time, steps times, waiting each time for the PDB's
// status to count the new pod: its status changes, and it allows nothing
// more.
func growUnderPDB(t *testing.T, e *env, ns, app string, steps int) {
	t.Helper()
	ctx, cs := testenv.Context(t), e.c.Client
	for i := 1; i <= steps; i++ {
		replicas := int32(2 + i)
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
		if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, app, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := devcluster.WaitForPDB(ctx, cs, ns, app, replicas, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEvictionEventsSettleIntoFewPasses: twenty pods evicted together send
// forty events (each pod terminating, then gone) milliseconds apart, and
// their PDB's status changes after each. They wake the drain together, a
// pass for a burst, not one each: the drain, from its first pass to
// Drained, has at most three passes per eviction (86 to 98 passes when each
// event woke one at once; 17 to 27 settled on a quiet machine, 42 in a
// suite run, when the evictions came further apart).
func TestEvictionEventsSettleIntoFewPasses(t *testing.T) {
	e, counter := countingPasses(t)
	c := e.c
	ctx := testenv.Context(t)
	cs := c.Client
	pool := map[string]string{"settle": "true"}
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "settle", Count: 2, Labels: pool})
	target, spare := nodes[0], nodes[1]
	updateNode(t, e, spare, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	ns := testenv.Namespace(t, c)
	const pods = 20
	dep := devcluster.Deployment(ns, "settle", pods)
	dep.Spec.Template.Spec.NodeSelector = pool
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "settle", "settle", "", "100%"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "settle"}), pods, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "settle", pods, time.Minute); err != nil {
		t.Fatal(err)
	}
	updateNode(t, e, spare, func(n *corev1.Node) { n.Spec.Unschedulable = false })

	create(t, e, testutil.NodeDrain(target, "", "cli:test"))
	nd := e.waitDrain(t, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	passes := counter.of(target)
	t.Logf("%d evictions, %d passes", nd.Status.Evicted, passes)
	if nd.Status.Evicted != pods {
		t.Errorf("evicted %d, want %d", nd.Status.Evicted, pods)
	}
	if passes > 3*pods {
		t.Errorf("%d passes for %d evictions made together: their events wake a pass each", passes, pods)
	}
}
