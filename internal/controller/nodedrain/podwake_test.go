package nodedrain

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/testutil"
)

// TestEvictedPodTerminatingWakesDrainsOfItsPDBs: the drains of many nodes
// share a PDB's budget, and an evicted pod counts against it until the cache
// shows it terminating. That moment must wake every drain with a pod the
// PDB selects, not only the drain of the evicted pod's node: the PDB's
// status may not change again for seconds (it did not in `make bench`:
// other nodes' pods waited 1.3 s with a disruption allowed). The mapping
// is pure; a fake client holds the cache.
func TestEvictedPodTerminatingWakesDrainsOfItsPDBs(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	evicted := testutil.Pod("web-a").Namespace("apps").OnNode("node-a").Labels("app", "web").Terminating(now).Obj()
	running := testutil.Pod("web-a2").Namespace("apps").OnNode("node-a").Labels("app", "web").Obj()
	objs := []client.Object{
		testutil.NodeDrain("node-a", "", "cli:test"), testutil.NodeDrain("node-b", "", "cli:test"),
		testutil.NodeDrain("node-c", "", "cli:test"), testutil.NodeDrain("node-d", "", "cli:test"),
		running, // the evicted pod is in the event, not needed in the cache
		testutil.Pod("web-b").Namespace("apps").OnNode("node-b").Labels("app", "web").Obj(),
		testutil.Pod("db-c").Namespace("apps").OnNode("node-c").Labels("app", "db").Obj(),
		testutil.PDB("apps", "web", "web", 1, 1),
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.NodeNameOf).
		WithIndex(&corev1.Pod{}, index.PodLabel, index.LabelsOf).Build()
	r := &Reconciler{Client: cl}
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
	r.claims.claim(evicted, []string{"apps/web"})
	if got := woken(evicted); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("an evicted pod now terminating woke %v, want node-a and node-b (a pod of PDB web there), not node-c or node-d", got)
	}
	r.claims.claim(running, []string{"apps/web"})
	if got := woken(running); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("a claimed pod not yet terminating woke %v, want only its node's drain (its budget is still used)", got)
	}
}

// TestPDBUpdateWakesTheDrainsOfOldAndNewPods: a PDB status change (one per
// eviction it allows) wakes the drains of the nodes with its pods; a
// selector change wakes those of the pods it selected before as well, whose
// budget it no longer holds. Pure mapping over a fake cache.
func TestPDBUpdateWakesTheDrainsOfOldAndNewPods(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	objs := []client.Object{
		testutil.NodeDrain("node-a", "", "cli:test"), testutil.NodeDrain("node-b", "", "cli:test"),
		testutil.NodeDrain("node-c", "", "cli:test"),
		testutil.Pod("web-a").Namespace("apps").OnNode("node-a").Labels("app", "web").Obj(),
		testutil.Pod("api-b").Namespace("apps").OnNode("node-b").Labels("app", "api").Obj(),
		testutil.Pod("db-c").Namespace("apps").OnNode("node-c").Labels("app", "db").Obj(),
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.NodeNameOf).
		WithIndex(&corev1.Pod{}, index.PodLabel, index.LabelsOf).Build()
	r := &Reconciler{Client: cl}
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
	webLess := web.DeepCopy()
	webLess.Status.DisruptionsAllowed = 0
	if got := woken(web, webLess); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("a status change woke %v, want node-a only", got)
	}
	api := webLess.DeepCopy()
	api.Spec.Selector.MatchLabels = map[string]string{"app": "api"}
	if got := woken(webLess, api); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("a selector change from web to api woke %v, want node-a (released) and node-b (now guarded), not node-c", got)
	}
}
