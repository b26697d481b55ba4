package nodedrain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestPolicyChosenByNodeSelectorAndOverlapsHold: a node's drain follows the
// DrainPolicy whose nodeSelector matches it; when two policies select a node
// both report Overlapping and the drain waits (AmbiguousPolicy) with its pods
// in place, until one policy stops selecting it.
func TestPolicyChosenByNodeSelectorAndOverlapsHold(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "pol", Count: 2, Labels: map[string]string{"pool": "pol"}})
	ns := testenv.Namespace(t, e.c)
	if err := devcluster.WaitForServiceAccount(ctx, e.c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "loner-"+n, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Under the built-in defaults a pod without a controller blocks a drain;
	// the pool's policy lets vacate evict it.
	loose := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pol-loose"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "pol"}},
		Pods:         v1alpha1.PodPolicy{Unmanaged: "Delete"}}}
	create(t, e, loose)
	waitPolicy(t, e, loose.Name, "governing 2 nodes without overlap", func(dp *v1alpha1.DrainPolicy) bool {
		return dp.Status.Nodes == 2 && meta.IsStatusConditionFalse(dp.Status.Conditions, v1alpha1.ConditionOverlapping)
	})

	first := testutil.NodeDrain(nodes[0], "", "cli:test")
	create(t, e, first)
	e.waitDrain(t, nodes[0], "Drained under pol-loose", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if _, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, "loner-"+nodes[0], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod without a controller is still there (%v): the pool's policy was not applied", err)
	}

	// A second policy that selects the same nodes: both say so, and a new
	// drain of the pool waits with its pods in place.
	also := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pol-also"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpExists}}}}}
	create(t, e, also)
	for name, other := range map[string]string{loose.Name: also.Name, also.Name: loose.Name} {
		waitPolicy(t, e, name, "Overlapping with "+other, func(dp *v1alpha1.DrainPolicy) bool {
			c := meta.FindStatusCondition(dp.Status.Conditions, v1alpha1.ConditionOverlapping)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "DrainPolicy "+other+" also selects") &&
				strings.Contains(c.Message, nodes[1])
		})
	}
	second := testutil.NodeDrain(nodes[1], "", "cli:test")
	create(t, e, second)
	e.waitDrain(t, nodes[1], "held by the ambiguous policy", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return nd.Status.Phase == v1alpha1.PhasePending && c != nil && c.Reason == v1alpha1.ReasonAmbiguousPolicy &&
			strings.Contains(c.Message, "pol-also, pol-loose all select the node")
	})
	time.Sleep(2 * time.Second) // a moment in which a wrong controller would act
	if n, err := e.c.Client.CoreV1().Nodes().Get(ctx, nodes[1], metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s cordoned under an ambiguous policy (%v)", nodes[1], err)
	}
	if _, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, "loner-"+nodes[1], metav1.GetOptions{}); err != nil {
		t.Errorf("a pod was evicted under an ambiguous policy: %v", err)
	}

	// One policy steps back: the overlap clears and the drain proceeds.
	if err := e.cl.Delete(ctx, also); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, e, loose.Name, "no longer overlapping", func(dp *v1alpha1.DrainPolicy) bool {
		return meta.IsStatusConditionFalse(dp.Status.Conditions, v1alpha1.ConditionOverlapping)
	})
	e.waitDrain(t, nodes[1], "Drained once one policy selects it", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
}

// create creates obj and deletes it when the test ends.
func create(t *testing.T, e *env, obj client.Object) {
	t.Helper()
	if err := e.cl.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
	t.Cleanup(func() { deleteAndForget(e, obj) })
}

// deleteAndForget deletes a test's object and waits until it is gone, so
// that the next test (or the same one under -count) can create it again
// under its name; a finalizer nobody removes any more (its controller
// stopped with the test) is dropped after a while.
func deleteAndForget(e *env, obj client.Object) {
	ctx := context.Background()
	if err := e.cl.Delete(ctx, obj); err != nil {
		return
	}
	key := client.ObjectKeyFromObject(obj)
	gone := func(timeout time.Duration) bool {
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(e.cl.Get(ctx, key, obj.DeepCopyObject().(client.Object))), nil
		}) == nil
	}
	if gone(2 * time.Second) {
		return
	}
	_ = e.cl.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	gone(10 * time.Second)
}

func waitPolicy(t *testing.T, e *env, name, what string, cond func(*v1alpha1.DrainPolicy) bool) {
	t.Helper()
	dp := &v1alpha1.DrainPolicy{}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.cl.Get(ctx, types.NamespacedName{Name: name}, dp); err != nil {
			return false, nil
		}
		return cond(dp), nil
	})
	if err != nil {
		t.Fatalf("DrainPolicy %s never %s; status: %+v", name, what, dp.Status)
	}
}
