package nodedrain_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/surge"
)

// TestSurgeUndoIsBoundedByCancelTimeout: a drain is cancelled while its
// replacement is starting, and the Eviction API refuses to remove the
// replacement for good (PDB web, minAvailable 2, counts one healthy pod:
// the replacement is not Ready, and another pod of web never is). The undo
// tries until timeouts.cancel (the default, 10 minutes, on the
// controller's clock) has passed, then gives the node back and reports the
// replacement it left (the drain's condition, a Warning event), which no
// longer carries vacate's labels or the drain's owner reference: the
// garbage collector does not delete it past its PDB with the drain.
func TestSurgeUndoIsBoundedByCancelTimeout(t *testing.T) {
	clk := testutil.NewShiftedClock(0)
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.Controller(t, c, func(o *operator.Options) { o.Controllers.Clock = clk })}
	ctx := testenv.Context(t)
	f := newSurgeFixture(t, e, "surge-undo", nil, nil)

	// Another pod of web that never becomes Ready, and a PDB that wants
	// two: it allows no disruption, and is unhealthy, so that not even a
	// pod that is not Ready may be evicted.
	sick := devcluster.BarePod(f.ns, "web-sick", f.spare)
	sick.Labels[devcluster.AppLabel] = "web"
	sick.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: surgeGate}}
	if _, err := c.Client.CoreV1().Pods(f.ns).Create(ctx, sick, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(f.ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"spec":{"minAvailable":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "PDB web counting 2 pods, 1 healthy", func() error {
		pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(f.ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pdb.Status.ObservedGeneration != pdb.Generation || pdb.Status.ExpectedPods != 2 || pdb.Status.CurrentHealthy != 1 {
			return fmt.Errorf("status %+v", pdb.Status)
		}
		return nil
	})

	requestAll(t, e, []string{f.node})
	nd := e.waitDrain(t, f.node, "a replacement starting", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return len(nd.Status.Surges) == 1 && nd.Status.Surges[0].Phase == v1alpha1.SurgeStarting && nd.Status.Surges[0].Replacement != ""
	})
	replacement := nd.Status.Surges[0].Replacement
	t.Logf("replacement %s starting; cancelling the drain", replacement)

	withdraw(t, e, f.node)
	e.waitDrain(t, f.node, "undoing", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseRestoring && nd.Status.UndoStartTime != nil
	})
	clk.Shift(policy.DefaultCancelTimeout + time.Second)

	nd = e.waitDrain(t, f.node, "undone, the replacement left", 90*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhasePending
	})
	cordoned := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionCordoned)
	t.Logf("Cordoned=%s %s: %s", cordoned.Status, cordoned.Reason, cordoned.Message)
	if cordoned.Status != metav1.ConditionFalse || !strings.Contains(cordoned.Message, f.ns+"/"+replacement) {
		t.Errorf("the drain's Cordoned condition does not name the replacement left (%s/%s): %s", f.ns, replacement, cordoned.Message)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, f.node, metav1.GetOptions{})
	if err != nil || node.Spec.Unschedulable {
		t.Errorf("node %s still cordoned (%v)", f.node, err)
	}
	left, err := c.Client.CoreV1().Pods(f.ns).Get(ctx, replacement, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("the replacement left: %v", err)
	case !left.DeletionTimestamp.IsZero():
		t.Errorf("the replacement %s is being deleted", replacement)
	case surge.Of(left) != "" || left.Labels[surge.LabelDrain] != "" || surge.DrainRef(left) != nil || len(left.OwnerReferences) != 0:
		t.Errorf("the replacement left still carries vacate's labels or owner reference: %v %v", left.Labels, left.OwnerReferences)
	}
	testutil.Eventually(t, 30*time.Second, "a Warning event naming the replacement left", func() error {
		list, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeDrain,involvedObject.name=" + f.node})
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Reason == v1alpha1.EventSurgeLeft && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, f.ns+"/"+replacement) {
				return nil
			}
			seen = append(seen, ev.Reason+": "+ev.Message)
		}
		return fmt.Errorf("events: %v", seen)
	})
}
