package nodedrain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	policyv1 "k8s.io/api/policy/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestStagesOnAFakeClock drives the NodeDrain reconciler's stages with a
// fake clock and the objects it reads, as Karpenter tests its controllers:
// an admitted drain is cordoned, its pod's eviction queued, its status
// derived from what the stages found; once timeouts.drain passes on the
// clock, the timeouts stage ends it Failed with the pod in place. No API
// server: the stage logic alone (the dev-cluster tests keep the end-to-end
// proofs).
func TestStagesOnAFakeClock(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
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
	queue := eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{Clock: clk})
	r := NewReconciler(cl, clk, events.NewFakeRecorder(100), queue)
	pass := func() (*v1alpha1.NodeDrain, reconcile.Result) {
		t.Helper()
		res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
		if err != nil {
			t.Fatalf("pass: %v", err)
		}
		got := &v1alpha1.NodeDrain{}
		if err := cl.Get(context.Background(), client.ObjectKey{Name: "n1"}, got); err != nil {
			t.Fatal(err)
		}
		return got, res
	}
	cond := func(nd *v1alpha1.NodeDrain, typ string) string {
		if c := meta.FindStatusCondition(nd.Status.Conditions, typ); c != nil {
			return string(c.Status) + "/" + c.Reason
		}
		return "absent"
	}

	got, res := pass()
	if got.Status.Phase != v1alpha1.PhaseEvicting || !r.Evictions.Pending(pod.UID) {
		t.Fatalf("after the first pass: phase %q, eviction queued %t; want Evicting, queued", got.Status.Phase, r.Evictions.Pending(pod.UID))
	}
	for typ, want := range map[string]string{v1alpha1.ConditionCordoned: "True/" + v1alpha1.ReasonCordoned,
		v1alpha1.ConditionEvacuated: "True/" + v1alpha1.ReasonNoEvacuations, v1alpha1.ConditionPodsEvicted: "False/" + v1alpha1.ReasonEvicting,
		v1alpha1.ConditionBlocked: "False/" + v1alpha1.ReasonNotBlocked, v1alpha1.ConditionDrained: "absent"} {
		if c := cond(got, typ); c != want {
			t.Errorf("after the first pass: %s = %s, want %s", typ, c, want)
		}
	}
	n := &corev1.Node{}
	if err := cl.Get(context.Background(), client.ObjectKey{Name: "n1"}, n); err != nil || !n.Spec.Unschedulable || !got.Cordoned(n) {
		t.Errorf("the node is not cordoned for the drain: %v %+v", err, n.Annotations)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("the drain comes back after %s, want within timeouts.drain (1m)", res.RequeueAfter)
	}

	clk.Step(61 * time.Second)
	got, _ = pass()
	if got.Status.Phase != v1alpha1.PhaseFailed || got.Status.CompletionTime == nil {
		t.Fatalf("past timeouts.drain: phase %q, completion %v; want Failed, set", got.Status.Phase, got.Status.CompletionTime)
	}
	for typ, want := range map[string]string{v1alpha1.ConditionBlocked: "True/" + v1alpha1.ReasonDrainTimeout,
		v1alpha1.ConditionDrained: "False/" + v1alpha1.ReasonDrainTimeout} {
		if c := cond(got, typ); c != want {
			t.Errorf("past timeouts.drain: %s = %s, want %s", typ, c, want)
		}
	}
	if r.Evictions.Pending(pod.UID) {
		t.Error("past timeouts.drain: the pod's eviction is still queued")
	}
}
