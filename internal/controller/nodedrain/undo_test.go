package nodedrain_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// laggingClient is the manager's cached client with an informer that has
// not yet seen the controller's own node patches: after the controller
// patches a node, reads of that node return it as it was before the patch,
// until the test ends. The API server itself is real and up to date.
type laggingClient struct {
	client.Client
	mu      sync.Mutex
	last    map[string]*corev1.Node
	stale   map[string]*corev1.Node
	patches atomic.Int64
}

func (c *laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	c.mu.Lock()
	old, lagging := c.stale[key.Name]
	c.mu.Unlock()
	if lagging {
		old.DeepCopyInto(node)
		return nil
	}
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	c.mu.Lock()
	c.last[key.Name] = node.DeepCopy()
	c.mu.Unlock()
	return nil
}

func (c *laggingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	if _, ok := obj.(*corev1.Node); ok {
		c.patches.Add(1)
		c.mu.Lock()
		if before, ok := c.last[obj.GetName()]; ok {
			c.stale[obj.GetName()] = before
		}
		c.mu.Unlock()
	}
	return nil
}

// runLaggingController runs the NodeDrain and admission controllers alone,
// both reading nodes through one laggingClient (as they share one cache),
// with APIReader the manager's uncached reader.
func runLaggingController(t *testing.T, c *devcluster.Cluster) *laggingClient {
	t.Helper()
	lc := &laggingClient{last: map[string]*corev1.Node{}, stale: map[string]*corev1.Node{}}
	runSolo(t, c, solo{client: func(cl client.Client) client.Client { lc.Client = cl; return lc }, shareClient: true})
	return lc
}

// TestCancelRightAfterCordonRestoresNode: the drain is cancelled after its
// cordon patch reached the API server but before the controller's cache saw
// it. The undo must still give the node back: it decides from a fresh read
// of the node, not from the cache.
func TestCancelRightAfterCordonRestoresNode(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	lc := runLaggingController(t, c)
	target := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "lag", Count: 1, Labels: map[string]string{testLabel: "lag"}})[0]
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "lag"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: "lag"}},
		Concurrency:  v1alpha1.Concurrency{BatchWindow: &metav1.Duration{}},
	}}
	if err := cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), dp) })

	nd := testutil.NodeDrain(target, "", "cli:test")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	// Admission cordons a drain before admitting it. Once the drain is
	// admitted, admission leaves its node alone: only the NodeDrain
	// controller's undo can give the node back.
	t.Log("waiting until the API server shows the node cordoned and the drain admitted (the controllers' cache shows neither cordon)")
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		if err != nil || !n.Spec.Unschedulable {
			return false, nil
		}
		got := &v1alpha1.NodeDrain{}
		return cl.Get(ctx, types.NamespacedName{Name: target}, got) == nil && meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionAdmitted), nil
	})
	if err != nil {
		t.Fatalf("the node was never cordoned with its drain admitted: %v", err)
	}
	patchesBefore := lc.patches.Load()
	t.Log("cancelling the drain")
	if err := cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return cl.Get(ctx, types.NamespacedName{Name: target}, &v1alpha1.NodeDrain{}) != nil, nil
	})
	if err != nil {
		t.Fatal("the NodeDrain was not released after the cancel")
	}
	n, err := c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] != "" {
		t.Errorf("after the cancel the node is unschedulable=%v with %s=%q: vacate's cordon was left behind",
			n.Spec.Unschedulable, v1alpha1.AnnotationCordonedBy, n.Annotations[v1alpha1.AnnotationCordonedBy])
	}
	if lc.patches.Load() == patchesBefore {
		t.Error("the undo never patched the node: the test proved nothing")
	}
}

// TestHandCopiedCordonAnnotationIsNotOurs: a node someone cordoned, carrying
// a vacate.dev/cordoned-by annotation that names the drain but not its UID
// (copied by hand, or left from another install), is never uncordoned.
func TestHandCopiedCordonAnnotationIsNotOurs(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	target := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "copied", Count: 1, Labels: map[string]string{testLabel: "copied"}})[0]
	patch := []byte(`{"spec":{"unschedulable":true},"metadata":{"annotations":{"` + v1alpha1.AnnotationCordonedBy + `":"` + target + `"}}}`)
	if _, err := e.c.Client.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nd := testutil.NodeDrain(target, "", "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	drained := e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if c := meta.FindStatusCondition(drained.Status.Conditions, v1alpha1.ConditionCordoned); c == nil || c.Reason != v1alpha1.ReasonAlreadyCordoned {
		t.Errorf("Cordoned condition = %+v, want reason %s (the annotation does not name this drain's UID)", c, v1alpha1.ReasonAlreadyCordoned)
	}
	if err := e.cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, target)
	after, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Spec.Unschedulable || after.Annotations[v1alpha1.AnnotationCordonedBy] != target {
		t.Errorf("vacate undid a cordon it did not make: unschedulable=%v, annotation %q", after.Spec.Unschedulable, after.Annotations[v1alpha1.AnnotationCordonedBy])
	}
}
