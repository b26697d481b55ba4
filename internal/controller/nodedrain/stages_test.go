package nodedrain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// stagesWorld is a NodeDrain reconciler on a fake clock and a fake client
// holding node n1 (policy "fake": timeouts.drain 1m), its pod web-1 and the
// NodeDrain n1, admitted at t0 and requested by cli:alice.
type stagesWorld struct {
	t   *testing.T
	clk *clocktesting.FakeClock
	cl  client.Client
	r   *Reconciler
	pod *corev1.Pod
}

func newStagesWorld(t *testing.T, t0 time.Time) *stagesWorld {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"pool": "fake"}}}
	pod := testutil.Pod("web-1").Namespace("apps").OnNode("n1").OwnedBy("ReplicaSet", "web").Obj()
	nd := testutil.NodeDrain("n1", "", "cli:alice")
	nd.Status.StartTime = &metav1.Time{Time: t0}
	nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted,
		LastTransitionTime: metav1.NewTime(t0)}}
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fake"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "fake"}},
		Timeouts:     v1alpha1.Timeouts{Drain: &metav1.Duration{Duration: time.Minute}},
	}}
	cl := fake.NewClientBuilder().WithScheme(testutil.Scheme(t)).
		WithObjects(node, pod, nd, dp, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}).
		WithStatusSubresource(&v1alpha1.NodeDrain{}).
		WithIndex(&corev1.Pod{}, index.PodNodeName, index.NodeNameOf).WithIndex(&corev1.Pod{}, index.Surge, index.SurgeKeysOf).Build()
	clk := clocktesting.NewFakeClock(t0)
	queue := eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{Clock: clk})
	return &stagesWorld{t: t, clk: clk, cl: cl, r: NewReconciler(cl, clk, events.NewFakeRecorder(100), queue), pod: pod}
}

// pass runs one pass of the drain and returns it as written.
func (w *stagesWorld) pass() (*v1alpha1.NodeDrain, reconcile.Result) {
	w.t.Helper()
	res, err := w.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
	if err != nil {
		w.t.Fatalf("pass: %v", err)
	}
	return w.drain(), res
}

func (w *stagesWorld) drain() *v1alpha1.NodeDrain {
	w.t.Helper()
	got := &v1alpha1.NodeDrain{}
	if err := w.cl.Get(context.Background(), client.ObjectKey{Name: "n1"}, got); err != nil {
		w.t.Fatal(err)
	}
	return got
}

func (w *stagesWorld) node() *corev1.Node {
	w.t.Helper()
	n := &corev1.Node{}
	if err := w.cl.Get(context.Background(), client.ObjectKey{Name: "n1"}, n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// update changes the drain's spec.
func (w *stagesWorld) update(change func(*v1alpha1.NodeDrain)) {
	w.t.Helper()
	nd := w.drain()
	change(nd)
	if err := w.cl.Update(context.Background(), nd); err != nil {
		w.t.Fatal(err)
	}
}

// conditions checks the drain's conditions: "Status/Reason", or "absent".
func (w *stagesWorld) conditions(when string, nd *v1alpha1.NodeDrain, want map[string]string) {
	w.t.Helper()
	for typ, want := range want {
		got := "absent"
		if c := meta.FindStatusCondition(nd.Status.Conditions, typ); c != nil {
			got = string(c.Status) + "/" + c.Reason
		}
		if got != want {
			w.t.Errorf("%s: %s = %s, want %s", when, typ, got, want)
		}
	}
}

// TestStagesOnAFakeClock drives the NodeDrain reconciler's stages with a
// fake clock and the objects it reads, as Karpenter tests its controllers:
// an admitted drain is cordoned, its pod's eviction queued, its status
// derived from what the stages found; once timeouts.drain passes on the
// clock, the timeouts stage ends it Failed with the pod in place. No API
// server: the stage logic alone (the dev-cluster tests keep the end-to-end
// proofs).
func TestStagesOnAFakeClock(t *testing.T) {
	w := newStagesWorld(t, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	got, res := w.pass()
	if got.Status.Phase != v1alpha1.PhaseEvicting || !w.r.Evictions.Pending(w.pod.UID) {
		t.Fatalf("after the first pass: phase %q, eviction queued %t; want Evicting, queued", got.Status.Phase, w.r.Evictions.Pending(w.pod.UID))
	}
	w.conditions("after the first pass", got, map[string]string{v1alpha1.ConditionCordoned: "True/" + v1alpha1.ReasonCordoned,
		v1alpha1.ConditionEvacuated: "True/" + v1alpha1.ReasonNoEvacuations, v1alpha1.ConditionPodsEvicted: "False/" + v1alpha1.ReasonEvicting,
		v1alpha1.ConditionBlocked: "False/" + v1alpha1.ReasonNotBlocked, v1alpha1.ConditionDrained: "absent"})
	if n := w.node(); !n.Spec.Unschedulable || !got.Cordoned(n) {
		t.Errorf("the node is not cordoned for the drain: %+v", n.Annotations)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("the drain comes back after %s, want within timeouts.drain (1m)", res.RequeueAfter)
	}

	w.clk.Step(61 * time.Second)
	got, _ = w.pass()
	if got.Status.Phase != v1alpha1.PhaseFailed || got.Status.CompletionTime == nil {
		t.Fatalf("past timeouts.drain: phase %q, completion %v; want Failed, set", got.Status.Phase, got.Status.CompletionTime)
	}
	w.conditions("past timeouts.drain", got, map[string]string{v1alpha1.ConditionBlocked: "True/" + v1alpha1.ReasonDrainTimeout,
		v1alpha1.ConditionDrained: "False/" + v1alpha1.ReasonDrainTimeout})
	if w.r.Evictions.Pending(w.pod.UID) {
		t.Error("past timeouts.drain: the pod's eviction is still queued")
	}
}

// TestRunAgainAndUndoOnAFakeClock: a Failed drain that a new requester
// joins runs again, and waits for admission afresh in the same pass (a new
// run counted, its last run's admission no longer its own: Pending,
// Drained=False RequesterAdded; the Admitted condition is admission's and
// left as it was). When every requester leaves, the undo uncordons the
// node vacate cordoned and leaves the drain idle: Pending, Cordoned=False
// Restored, the run's conditions gone, and a request that comes back is a
// run of its own.
func TestRunAgainAndUndoOnAFakeClock(t *testing.T) {
	w := newStagesWorld(t, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	w.pass()
	w.clk.Step(61 * time.Second)
	if got, _ := w.pass(); got.Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("past timeouts.drain: phase %q, want Failed", got.Status.Phase)
	}

	w.update(func(nd *v1alpha1.NodeDrain) {
		nd.Spec.Requesters = append(nd.Spec.Requesters, v1alpha1.Requester{Name: "agent:shutdown"})
	})
	got, _ := w.pass()
	if got.Status.Phase != v1alpha1.PhasePending || got.Status.Run == nil || got.Status.Run.Reason != v1alpha1.ReasonRequesterAdded {
		t.Fatalf("a requester joined the Failed drain: phase %q, run %+v; want Pending, RequesterAdded", got.Status.Phase, got.Status.Run)
	}
	if got.Admitted() || got.Status.RunNumber != 1 {
		t.Errorf("running again: admitted %t, run %d; want not admitted, run 1", got.Admitted(), got.Status.RunNumber)
	}
	w.conditions("running again", got, map[string]string{v1alpha1.ConditionAdmitted: "True/" + v1alpha1.ReasonAdmitted, v1alpha1.ConditionBlocked: "absent",
		v1alpha1.ConditionDrained: "False/" + v1alpha1.ReasonRequesterAdded, v1alpha1.ConditionCordoned: "True/" + v1alpha1.ReasonCordoned})

	w.update(func(nd *v1alpha1.NodeDrain) { nd.Spec.Requesters = nil })
	got, _ = w.pass()
	if got.Status.Phase != v1alpha1.PhasePending || got.Status.Total != 0 || got.Status.RunNumber != 2 || got.Admitted() {
		t.Errorf("undone: phase %q, total %d, run %d, admitted %t; want Pending, idle, run 2, not admitted",
			got.Status.Phase, got.Status.Total, got.Status.RunNumber, got.Admitted())
	}
	again, _ := w.pass()
	if again.Status.RunNumber != 2 {
		t.Errorf("an idle drain's next pass counted another run: %d, want 2", again.Status.RunNumber)
	}
	w.conditions("undone", got, map[string]string{v1alpha1.ConditionCordoned: "False/" + v1alpha1.ReasonRestored,
		v1alpha1.ConditionBlocked: "absent", v1alpha1.ConditionDrained: "absent"})
	if n := w.node(); n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] != "" {
		t.Errorf("undone: the node is still cordoned (%t) or annotated %q", n.Spec.Unschedulable, n.Annotations[v1alpha1.AnnotationCordonedBy])
	}
}
