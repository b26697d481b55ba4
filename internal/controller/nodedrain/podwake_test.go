package nodedrain

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestEvictedPodTerminatingWakesDrainsOfItsPDBs: the drains of many nodes
// share a PDB's budget, and an evicted pod counts against it until the cache
// shows it terminating or the PDB's status counts it. When the pod's
// terminating comes first, it must wake every drain with a pod waiting on
// that PDB's budget, not only the drain of the evicted pod's node: the PDB's
// status may not change again for seconds (it did not in `make bench`:
// other nodes' pods waited 1.3 s with a disruption allowed). When the
// status counted it first, the claim took nothing and its end wakes no
// other drain. A drain with a pod of the PDB that does not wait on its
// budget, or that waits on another PDB, is not woken. The mapping is pure;
// a fake client holds the cache.
func TestEvictedPodTerminatingWakesDrainsOfItsPDBs(t *testing.T) {
	scheme := testutil.Scheme(t)
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	evicted := testutil.Pod("web-a").Namespace("apps").OnNode("node-a").Labels("app", "web").Terminating(now).Obj()
	running := testutil.Pod("web-a2").Namespace("apps").OnNode("node-a").Labels("app", "web").Obj()
	objs := []client.Object{
		testutil.NodeDrain("node-a", "", "cli:test"), testutil.NodeDrain("node-b", "", "cli:test"),
		testutil.NodeDrain("node-c", "", "cli:test"), testutil.NodeDrain("node-d", "", "cli:test"),
		running, // the evicted pod is in the event, not needed in the cache
		testutil.Pod("web-b").Namespace("apps").OnNode("node-b").Labels("app", "web").Obj(),
		testutil.Pod("db-c").Namespace("apps").OnNode("node-c").Labels("app", "db").Obj(),
		testutil.Pod("web-d").Namespace("apps").OnNode("node-d").Labels("app", "web").Obj(),
		testutil.PDB("apps", "web", "web", 1, 1),
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.NodeNameOf).Build()
	r := &Reconciler{Client: cl, Evictions: eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{})}
	claim := func(pod *corev1.Pod) {
		req := eviction.PodRequest(pod, nil, 0)
		req.PDBs = []string{"apps/web"}
		req.Marks = eviction.MarksOf(pod.Name, req.PDBs, map[string]*policyv1.PodDisruptionBudget{"apps/web": r.guards.Get("apps/web")})
		r.Evictions.Reserve(req)
	}
	r.waiters.wait("node-b", []string{"apps/web"}, 0)
	r.waiters.wait("node-c", []string{"apps/db"}, 0)
	// node-d has a pod of PDB web, whose eviction is underway: not a waiter.
	ctx := context.Background()
	woken := func(pod client.Object) []string {
		var out []string
		for _, req := range r.drainsOfPod(ctx, pod) {
			out = append(out, req.Name)
		}
		slices.Sort(out)
		return out
	}

	if got := woken(evicted); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("a terminating pod vacate did not evict woke %v, want only its node's drain", got)
	}
	claim(evicted)
	if got := woken(evicted); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("an evicted pod now terminating woke %v, want node-a and node-b (a pod waiting on PDB web there), not node-c (waits on db) or node-d (waits on nothing)", got)
	}
	counting := testutil.PDB("apps", "web", "web", 1, 0)
	counting.Status.DisruptedPods = map[string]metav1.Time{evicted.GetName(): metav1.Now()}
	r.guards.Set(counting)
	if got := woken(evicted); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("an evicted pod that its PDB's status already counts woke %v, want only its node's drain (its claim took nothing from the budget)", got)
	}
	claim(running)
	if got := woken(running); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("a claimed pod not yet terminating woke %v, want only its node's drain (its budget is still used)", got)
	}
}

// TestPDBUpdateWakesTheDrainsOfOldAndNewPods: a PDB status change wakes the
// drains with a pod waiting on its budget, and only when it can free one:
// it allows a disruption, more than before or at a new generation (not the
// eviction's own decrement, nor a recount that allows as many); a selector
// change wakes the
// drains of the nodes with a pod it selects, or selected before (whose
// budget it no longer holds), waiting or not. Pure mapping over a fake
// cache.
func TestPDBUpdateWakesTheDrainsOfOldAndNewPods(t *testing.T) {
	scheme := testutil.Scheme(t)
	objs := []client.Object{
		testutil.NodeDrain("node-a", "", "cli:test"), testutil.NodeDrain("node-b", "", "cli:test"),
		testutil.NodeDrain("node-c", "", "cli:test"), testutil.NodeDrain("node-d", "", "cli:test"),
		testutil.Pod("web-a").Namespace("apps").OnNode("node-a").Labels("app", "web").Obj(),
		testutil.Pod("api-b").Namespace("apps").OnNode("node-b").Labels("app", "api").Obj(),
		testutil.Pod("db-c").Namespace("apps").OnNode("node-c").Labels("app", "db").Obj(),
		testutil.Pod("web-d").Namespace("apps").OnNode("node-d").Labels("app", "web").Obj(),
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.NodeNameOf).Build()
	r := &Reconciler{Client: cl}
	r.waiters.wait("node-a", []string{"apps/guard"}, 0) // node-d's pod of the PDB does not wait
	h := r.pdbHandler()
	woken := func(old, cur client.Object) []string {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		h.Update(context.Background(), event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
		var out []string
		for q.Len() > 0 {
			req, _ := q.Get()
			out = append(out, req.Name)
			q.Done(req)
		}
		slices.Sort(out)
		return out
	}
	web := testutil.PDB("apps", "guard", "web", 1, 1)
	webNone := web.DeepCopy()
	webNone.Status.DisruptionsAllowed = 0
	if got := woken(web, webNone); len(got) != 0 {
		t.Errorf("a status change that allows no disruption woke %v, want none", got)
	}
	if got := woken(webNone, web); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("a status change that allows a disruption woke %v, want node-a only (its pod waits on the PDB)", got)
	}
	webTwo := web.DeepCopy()
	webTwo.Status.DisruptionsAllowed = 2
	if got := woken(webTwo, web); len(got) != 0 {
		t.Errorf("an eviction's status change (allows 1, down from 2) woke %v, want none: it frees nothing", got)
	}
	recount := web.DeepCopy()
	recount.Status.DisruptedPods = map[string]metav1.Time{"web-x": metav1.Now()}
	if got := woken(recount, web); len(got) != 0 {
		t.Errorf("a recount that allows as many as before woke %v, want none", got)
	}
	observed := web.DeepCopy()
	observed.Status.ObservedGeneration++
	if got := woken(web, observed); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("a status of a new generation that allows a disruption woke %v, want node-a (a refusal is tried again then)", got)
	}
	api := webNone.DeepCopy()
	api.Spec.Selector.MatchLabels = map[string]string{"app": "api"}
	if got := woken(webNone, api); !slices.Equal(got, []string{"node-a", "node-b", "node-d"}) {
		t.Errorf("a selector change from web to api woke %v, want node-a and node-d (released) and node-b (now guarded), not node-c", got)
	}
}

// TestWaiterSeesEventsDuringItsPass: a pass reads the PDBs, then records
// what it waits on. A waking event between the two finds no waiter; the
// pass is told when it records, and runs again. An event before the pass
// started, or for another PDB, is not a miss.
func TestWaiterSeesEventsDuringItsPass(t *testing.T) {
	var w pdbWaiters
	w.wake("apps/web") // before the pass
	since := w.now()
	if w.wait("node-a", []string{"apps/web"}, since) {
		t.Error("an event before the pass started counted as missed")
	}
	since = w.now()
	w.wake("apps/db")
	if w.wait("node-a", []string{"apps/web"}, since) {
		t.Error("an event of another PDB counted as missed")
	}
	since = w.now()
	if got := w.wake("apps/web"); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("woke %v, want node-a (recorded by its last pass)", got)
	}
	if !w.wait("node-a", []string{"apps/web"}, since) {
		t.Error("an event of its PDB during the pass was not reported: the drain would sleep through it")
	}
	w.forget("node-a")
	if got := w.wake("apps/web"); len(got) != 0 {
		t.Errorf("a drain that stopped was woken: %v", got)
	}
}

// TestEvictedOutcomeWakesOnlyIfItsEventCameFirst: an Evicted outcome wakes
// the drain only when the cache already shows the pod terminating or gone
// (or a new pod under its name): that watch event woke a pass that may have
// missed the outcome. A pod the cache still shows running has its event to
// come, which wakes the drain.
func TestEvictedOutcomeWakesOnlyIfItsEventCameFirst(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	running := testutil.Pod("web-1").Namespace("apps").OnNode("n1").Obj()
	leaving := testutil.Pod("web-2").Namespace("apps").OnNode("n1").Terminating(now).Obj()
	leaving.Finalizers = []string{"example.com/hold"} // the fake client keeps a terminating object only with one
	renamed := testutil.Pod("web-3").Namespace("apps").OnNode("n1").Obj()
	cl := fake.NewClientBuilder().WithScheme(testutil.Scheme(t)).WithObjects(running, leaving, renamed).Build()
	r := &Reconciler{Client: cl}
	for _, tc := range []struct {
		name string
		pod  types.NamespacedName
		uid  types.UID
		want bool
	}{
		{"running in the cache", client.ObjectKeyFromObject(running), running.UID, false},
		{"terminating in the cache", client.ObjectKeyFromObject(leaving), leaving.UID, true},
		{"gone from the cache", types.NamespacedName{Namespace: "apps", Name: "web-9"}, "uid-web-9", true},
		{"another pod under its name", client.ObjectKeyFromObject(renamed), "uid-an-older-web-3", true},
	} {
		if got := r.seenLeaving(eviction.Outcome{Pod: tc.pod, UID: tc.uid, Node: "n1", Result: eviction.Evicted}); got != tc.want {
			t.Errorf("%s: wakes the drain %t, want %t", tc.name, got, tc.want)
		}
	}
}
