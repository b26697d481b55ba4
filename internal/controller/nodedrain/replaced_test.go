package nodedrain

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/admission"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestReplacedNodeWaitsForAdmission: a drain admitted for a node that was
// then deleted and created again under the same name never goes on under
// that admission. Its pass drops what it had of the old node (the
// Evacuation of the old node is deleted) but writes no Admitted and records
// nothing of the new node while the drain is still admitted; once the
// admission controller's pass of the held drains gave the admission up
// (NodeReplaced), it records the new node's UID, starts its counts over
// and says so in an event. The cluster is a fake client: which controller
// writes what is the point, not the timing (TestReplacedNodeStartsOver runs
// the scenario on a real control plane).
func TestReplacedNodeWaitsForAdmission(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	nd, oldEvac, node := replacedNodeFixture(now)
	cl := fake.NewClientBuilder().WithScheme(testutil.Scheme(t)).WithObjects(nd, oldEvac, node).
		WithStatusSubresource(&v1alpha1.NodeDrain{}).Build()
	rec := events.NewFakeRecorder(10)
	r := NewReconciler(cl, clocktesting.NewFakeClock(now), rec, eviction.NewQueueWithEvictor(nil, eviction.Options{}))
	adm := &admission.Reconciler{Client: cl, Clock: clocktesting.NewFakePassiveClock(now), Events: events.NewFakeRecorder(10)}
	ctx := context.Background()
	get := func() *v1alpha1.NodeDrain {
		t.Helper()
		got := &v1alpha1.NodeDrain{}
		if err := cl.Get(ctx, client.ObjectKey{Name: "n1"}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	pass := func() reconcile.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: "n1"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	t.Log("the NodeDrain controller's pass while the drain is still admitted")
	if res := pass(); res.RequeueAfter != requeue.ConflictRetry {
		t.Errorf("the pass comes back after %s, want %s", res.RequeueAfter, requeue.ConflictRetry)
	}
	got := get()
	switch {
	case !got.Admitted() || meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAdmitted).Message != "admitted":
		t.Errorf("the NodeDrain controller wrote Admitted: %+v", got.Status.Conditions)
	case got.Status.NodeUID != "node-old" || got.Status.Total != 3 || got.Status.RunID != "run-1":
		t.Errorf("recorded the new node while still admitted: nodeUID %s, total %d, runID %q", got.Status.NodeUID, got.Status.Total, got.Status.RunID)
	case got.Status.Phase != v1alpha1.PhasePending:
		t.Errorf("phase %s, want Pending (it no longer runs)", got.Status.Phase)
	case got.Status.StartTime == nil:
		t.Error("the NodeDrain controller cleared startTime, admission's to write")
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(oldEvac), &v1alpha1.Evacuation{}); !apierrors.IsNotFound(err) {
		t.Errorf("the old node's Evacuation is still there (%v)", err)
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("an event before the new node is recorded: %s", ev)
	default:
	}
	if res := pass(); res.RequeueAfter != requeue.ConflictRetry || get().Status.NodeUID != "node-old" {
		t.Errorf("a second pass while admitted: requeue %s, nodeUID %s", res.RequeueAfter, get().Status.NodeUID)
	}

	t.Log("the admission controller holds it: NodeReplaced")
	if _, err := adm.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: admission.HeldKey}}); err != nil {
		t.Fatal(err)
	}
	got = get()
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAdmitted)
	wantMsg := "node n1 was deleted and created again (uid node-new, was node-old): it is another node; the drain starts over on it"
	if got.Admitted() || c.Reason != v1alpha1.ReasonNodeReplaced || c.Message != wantMsg || got.Status.StartTime != nil {
		t.Fatalf("admission did not hold the drain: %+v, startTime %v", c, got.Status.StartTime)
	}

	t.Log("the NodeDrain controller's next pass starts over on the new node")
	pass()
	got = get()
	switch {
	case got.Status.NodeUID != "node-new":
		t.Errorf("nodeUID %s, want node-new", got.Status.NodeUID)
	case got.Status.Total != 0 || got.Status.Evicted != 0 || got.Status.RunID != "":
		t.Errorf("counts not started over: total %d, evicted %d, runID %q", got.Status.Total, got.Status.Evicted, got.Status.RunID)
	case meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCordoned) != nil:
		t.Error("the old node's Cordoned condition is still there")
	case meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAdmitted).Message != wantMsg:
		t.Errorf("Admitted changed: %+v", got.Status.Conditions)
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, v1alpha1.EventNodeReplaced) || !strings.Contains(ev, wantMsg) {
			t.Errorf("event %q, want NodeReplaced saying %q", ev, wantMsg)
		}
	default:
		t.Error("no NodeReplaced event")
	}
	if reason, _ := admission.Held(got, node, nil); reason != "" {
		t.Errorf("still held (%s) once the new node is recorded: its queue would never take it", reason)
	}
}

// replacedNodeFixture is the drain of node n1 admitted an hour before now,
// two of its three pods evicted, with an Evacuation of provider store, both
// recorded for the node of UID node-old; and n1 as it is now, another node
// (UID node-new) created under the name.
func replacedNodeFixture(now time.Time) (nd *v1alpha1.NodeDrain, oldEvac *v1alpha1.Evacuation, node *corev1.Node) {
	started := metav1.NewTime(now.Add(-time.Hour))
	nd = testutil.NodeDrain("n1", "", "cli:test")
	nd.UID = "drain-1"
	nd.Finalizers = []string{v1alpha1.FinalizerRestore}
	nd.Status = v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseEvicting, NodeUID: "node-old", StartTime: &started, RequestTime: &started,
		Total: 3, Evicted: 2, Remaining: 1, RunID: "run-1",
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted, Message: "admitted", LastTransitionTime: started},
			{Type: v1alpha1.ConditionCordoned, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCordoned, Message: v1alpha1.MessageCordoned, LastTransitionTime: started},
		}}
	oldEvac = &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.EvacuationName("n1", "store")},
		Spec: v1alpha1.EvacuationSpec{NodeName: "n1", Provider: "store", Mode: v1alpha1.ModeMaintenance, DrainUID: "drain-1", NodeUID: "node-old"}}
	node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-new"}}
	return nd, oldEvac, node
}
