package admission_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// TestACompleteBatchStartsWithoutTheWindow: under a policy whose batch
// window is an hour and maxParallelNodes 2, a requester asks for three
// drains as one batch (vacate drain n1 n2 n3). The first two wait for the
// rest of their batch; once the third is requested, two are admitted at
// once, well inside the window, and the third waits for a slot: the batch
// skips the window and nothing else. Then the abuse: a drain without a
// batch is gathering its own, and a tenant requests another node's drain
// with a forged batch of one; it waits for the window with the other
// rather than taking a slot before it. A watch checks at every change that
// no more than two drains ever hold an admission.
func TestACompleteBatchStartsWithoutTheWindow(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	const limit = 2
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "bat", Count: 5, Labels: map[string]string{"fleet": "bat"}})
	if err := cl.Create(ctx, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bat"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "bat"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(limit)), BatchWindow: &metav1.Duration{Duration: time.Hour}},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bat"}}) })
	aw := watchAdmissions(t, cl, nodes, limit)
	runAdmission(t, c, nil)

	batch := &v1alpha1.RequestBatch{ID: "b1", Size: 3}
	t.Log("two of a batch of three requested: they wait for the third")
	requestAs(t, cl, nodes[0], "cli:alice", batch)
	requestAs(t, cl, nodes[1], "cli:alice", batch)
	waitReason(t, cl, nodes[0], v1alpha1.ReasonWaitingForBatch)
	waitReason(t, cl, nodes[1], v1alpha1.ReasonWaitingForBatch)

	t.Log("the third requested: two admitted within the hour's window, the third waits for a slot")
	requestAs(t, cl, nodes[2], "cli:alice", batch)
	testutil.Eventually(t, 2*time.Minute, "two of the batch admitted, the third waiting for a slot", testutil.Seen(func() (bool, string) {
		admitted, waiting, _ := queueState(t, cl, nodes[:3])
		return len(admitted) == limit && len(waiting) == 1 && reasonOf(t, cl, waiting[0]) == schedule.WaitingForSlot,
			fmt.Sprintf("admitted %v, waiting %v", admitted, waiting)
	}))
	for _, n := range nodes[:3] {
		removeDrain(cl, n)
	}
	testutil.Eventually(t, time.Minute, "the batch's drains gone", testutil.Seen(func() (bool, string) {
		for _, n := range nodes[:3] {
			if err := cl.Get(ctx, client.ObjectKey{Name: n}, &v1alpha1.NodeDrain{}); err == nil {
				return false, n + " still there"
			}
		}
		return true, ""
	}))

	t.Log("a drain without a batch gathers; a forged batch of one requested after it waits with it")
	requestAs(t, cl, nodes[3], "cli:bob", nil)
	waitReason(t, cl, nodes[3], v1alpha1.ReasonWaitingForBatch)
	requestAs(t, cl, nodes[4], "cli:mallory", &v1alpha1.RequestBatch{ID: "forged", Size: 1})
	waitReason(t, cl, nodes[4], v1alpha1.ReasonWaitingForBatch)
	if admitted, _, _ := queueState(t, cl, nodes[3:]); len(admitted) > 0 {
		t.Errorf("admitted %v inside the window, want none: the forged batch may not overtake the gathering drain", admitted)
	}
	aw.stop()
	aw.check(t)
}

// requestAs asks for a drain of the node as requester, in batch (nil:
// none), with the finalizer the NodeDrain controller would add; see
// request.
func requestAs(t *testing.T, cl client.Client, node, requester string, batch *v1alpha1.RequestBatch) {
	t.Helper()
	t.Cleanup(func() { removeDrain(cl, node) })
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node, Finalizers: []string{v1alpha1.FinalizerRestore}}, Spec: v1alpha1.NodeDrainSpec{
		NodeName: node, Requesters: []v1alpha1.Requester{{Name: requester, Reason: "batch test", Batch: batch}}}}
	if err := cl.Create(testenv.Context(t), nd); err != nil {
		t.Fatal(err)
	}
}

// reasonOf is the reason of the drain's Admitted condition ("" without one).
func reasonOf(t *testing.T, cl client.Client, node string) string {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(testenv.Context(t), client.ObjectKey{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	if cnd := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted); cnd != nil {
		return cnd.Reason
	}
	return ""
}

func waitReason(t *testing.T, cl client.Client, node, reason string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, node+" "+reason, testutil.Seen(func() (bool, string) {
		got := reasonOf(t, cl, node)
		return got == reason, "reason " + got
	}))
}
