package admission_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestAdmissionLeavesNoCordonBehind: admission cordons a drain's node only
// once the drain carries the finalizer its undo needs, and takes back a
// cordon that landed after the drain was cancelled.
//
// A drain without the finalizer (the NodeDrain controller has not seen it
// yet) is left alone while a later drain of the same queue is cordoned and
// admitted; deleted then, it would have left its node cordoned with nobody
// to undo it. Then a drain is cancelled, and its undo finds nothing to give
// back, in the instant between admission's decision and its cordon landing
// on the API server: admission reads the drain again after cordoning and
// uncordons the node.
func TestAdmissionLeavesNoCordonBehind(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cxl", Count: 3, Labels: map[string]string{"fleet": "cxl"}})
	if err := cl.Create(ctx, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cxl"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "cxl"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(3)), BatchWindow: &metav1.Duration{}},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a later run in the same cluster (-count) creates it again
		_ = cl.Delete(context.Background(), &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cxl"}})
	})
	bare, later, racing := nodes[0], nodes[1], nodes[2]

	// racing's drain is cancelled around admission's cordon of its node:
	// deleted, and its finalizer released by an undo that read the node
	// just before the cordon landed and found nothing to give back. The
	// controller sees its cordon succeed and the drain gone.
	var cancelled atomic.Bool
	cancelErr := make(chan error, 1)
	cancelAround := func(cl2 client.WithWatch) client.WithWatch {
		return interceptor.NewClient(cl2, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				if err := c.Patch(ctx, o, p, opts...); err != nil {
					return err
				}
				if n, ok := o.(*corev1.Node); ok && n.Name == racing && n.Spec.Unschedulable && cancelled.CompareAndSwap(false, true) {
					cancelErr <- cancelWithNothingToUndo(ctx, cl, racing) // the controller's cordon did succeed
				}
				return nil
			},
		})
	}
	runAdmission(t, c, cancelAround)

	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: bare}, Spec: v1alpha1.NodeDrainSpec{
		NodeName: bare, Requesters: []v1alpha1.Requester{{Name: "cli:test"}}}}
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeDrain(cl, bare) })
	request(t, cl, later)
	testutil.Eventually(t, 2*time.Minute, later+" admitted", testutil.Seen(func() (bool, string) {
		nd := &v1alpha1.NodeDrain{}
		if err := cl.Get(ctx, client.ObjectKey{Name: later}, nd); err != nil {
			return false, err.Error()
		}
		return nd.Admitted(), fmt.Sprintf("conditions %+v", nd.Status.Conditions)
	}))
	// The pass that admitted later read bare too (same queue, room for
	// both): had it counted, it would have been cordoned in that pass.
	if n := node(t, c, bare); n.Spec.Unschedulable {
		t.Errorf("node %s was cordoned for a drain without vacate's finalizer (annotation %q): a delete now would leave it cordoned",
			bare, n.Annotations[v1alpha1.AnnotationCordonedBy])
	}
	got := &v1alpha1.NodeDrain{}
	if err := cl.Get(ctx, client.ObjectKey{Name: bare}, got); err != nil {
		t.Fatal(err)
	}
	if got.Admitted() {
		t.Errorf("drain %s without vacate's finalizer was admitted", bare)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Finalizers = []string{v1alpha1.FinalizerRestore}
	if err := cl.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, bare+" cordoned once it has the finalizer", testutil.Seen(func() (bool, string) {
		n := node(t, c, bare)
		return n.Spec.Unschedulable, fmt.Sprintf("unschedulable=%v", n.Spec.Unschedulable)
	}))

	request(t, cl, racing)
	testutil.Eventually(t, 2*time.Minute, "admission to cordon "+racing+" after its drain was cancelled", testutil.Seen(func() (bool, string) {
		return cancelled.Load(), "no cordon of " + racing + " yet"
	}))
	if err := <-cancelErr; err != nil {
		t.Fatalf("cancelling %s: %v", racing, err)
	}
	testutil.Eventually(t, 2*time.Minute, racing+" given back", testutil.Seen(func() (bool, string) {
		n := node(t, c, racing)
		return !n.Spec.Unschedulable && n.Annotations[v1alpha1.AnnotationCordonedBy] == "",
			fmt.Sprintf("unschedulable=%v, %s=%q: the cordon outlived its drain", n.Spec.Unschedulable,
				v1alpha1.AnnotationCordonedBy, n.Annotations[v1alpha1.AnnotationCordonedBy])
	}))
}

// cancelWithNothingToUndo deletes the node's drain and releases its
// finalizer, as the NodeDrain controller's undo does when the node it read
// was not cordoned.
func cancelWithNothingToUndo(ctx context.Context, cl client.Client, name string) error {
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(ctx, client.ObjectKey{Name: name}, nd); err != nil {
		return err
	}
	if err := cl.Delete(ctx, nd); err != nil {
		return err
	}
	patch := client.MergeFrom(nd.DeepCopy())
	nd.Finalizers = nil
	return cl.Patch(ctx, nd, patch)
}

func node(t *testing.T, c *devcluster.Cluster, name string) *corev1.Node {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(testenv.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
