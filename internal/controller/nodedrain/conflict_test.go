package nodedrain

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/requeue"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestConflictedStatusWriteRunsThePassAgain: a pass whose status write
// loses the optimistic lock comes back by itself (after
// requeue.ConflictRetry). The newer version it lost to may be this
// controller's own progress write, whose watch event wakes no pass
// (progressUpdate): waiting for that event could wait forever.
func TestConflictedStatusWriteRunsThePassAgain(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	nd := testutil.NodeDrain("n1", "", "cli:test")
	nd.Finalizers = []string{v1alpha1.FinalizerRestore}
	conflicts := 0
	cl := fake.NewClientBuilder().WithScheme(testutil.Scheme(t)).WithObjects(nd).
		WithStatusSubresource(&v1alpha1.NodeDrain{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			conflicts++
			return apierrors.NewConflict(schema.GroupResource{Group: "vacate.dev", Resource: "nodedrains"}, o.GetName(), nil)
		}}).Build()
	r := NewReconciler(cl, clocktesting.NewFakeClock(now), events.NewFakeRecorder(10), eviction.NewQueueWithEvictor(nil, eviction.Options{}))
	// The node is missing: the pass holds the drain and records why.
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nd)})
	if err != nil {
		t.Fatalf("a conflict is no error: %v", err)
	}
	if conflicts == 0 {
		t.Fatal("the pass wrote no status: the test exercises nothing")
	}
	if res.RequeueAfter != requeue.ConflictRetry {
		t.Errorf("after a conflicted write the pass comes back after %s, want %s", res.RequeueAfter, requeue.ConflictRetry)
	}
}
