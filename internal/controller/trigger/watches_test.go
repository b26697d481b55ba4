package trigger

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// This file tests what wakes the controller: the node changes a trigger reads,
// and any DrainPolicy change.

// TestTriggerFieldsChangedPassesOnlyChangesATriggerReads: a node update
// wakes the trigger controller when it changes what a trigger or the
// finalizer reads: the cordon, the deletion, vacate's finalizer, the
// taints' keys and effects (in any order), the labels (which choose the
// policy) and vacate's cordon record. Status, heartbeats, other
// annotations, other finalizers, taint values and reordered taints do
// not. Creates and deletes always pass.
func TestTriggerFieldsChangedPassesOnlyChangesATriggerReads(t *testing.T) {
	base := func() *corev1.Node {
		n := newNode("node-a").Labels("pool", "gpu").Taint("a", corev1.TaintEffectNoSchedule).Taint("b", corev1.TaintEffectPreferNoSchedule).Obj()
		n.Annotations = map[string]string{"example.com/note": "x"}
		n.ResourceVersion = "1"
		return n
	}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"nothing but the resourceVersion", func(n *corev1.Node) { n.ResourceVersion = "2" }, false},
		{"status conditions", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}, false},
		{"MaintenancePlanned turned True", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMaintenancePlanned, Status: corev1.ConditionTrue}}
		}, true},
		{"MaintenancePlanned False", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeMaintenancePlanned, Status: corev1.ConditionFalse}}
		}, false},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"deleted", func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: now} }, true},
		{"vacate's finalizer added", func(n *corev1.Node) { n.Finalizers = []string{v1alpha1.FinalizerDrain} }, true},
		{"another finalizer added", func(n *corev1.Node) { n.Finalizers = []string{otherFinalizer} }, false},
		{"a taint added", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDrain, Effect: corev1.TaintEffectNoSchedule})
		}, true},
		{"a taint removed", func(n *corev1.Node) { n.Spec.Taints = n.Spec.Taints[:1] }, true},
		{"a taint's effect changed", func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectNoExecute }, true},
		{"the taints reordered", func(n *corev1.Node) { slices.Reverse(n.Spec.Taints) }, false},
		{"a taint's value changed", func(n *corev1.Node) { n.Spec.Taints[0].Value = "soon" }, false},
		{"a label changed", func(n *corev1.Node) { n.Labels["pool"] = "web" }, true},
		{"a label added", func(n *corev1.Node) { n.Labels["zone"] = "a" }, true},
		{"vacate's cordon record written", func(n *corev1.Node) { n.Annotations[v1alpha1.AnnotationCordonedBy] = "node-a/uid" }, true},
		{"another annotation changed", func(n *corev1.Node) { n.Annotations["example.com/note"] = "y" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, updated := base(), base()
			tc.change(updated)
			if got := triggerFieldsChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated}); got != tc.want {
				t.Errorf("update passes: %v, want %v", got, tc.want)
			}
		})
	}
	p := triggerFieldsChanged()
	if !p.Create(event.CreateEvent{Object: base()}) || !p.Delete(event.DeleteEvent{Object: base()}) {
		t.Error("a node's create or delete does not pass")
	}
}

// TestAPolicyChangeWakesEveryNode: a DrainPolicy change can change any
// node's triggers, so its map function asks for a pass of every node, and
// for none when the nodes cannot be listed.
func TestAPolicyChangeWakesEveryNode(t *testing.T) {
	nodes := []client.Object{newNode("node-a").Obj(), newNode("node-b").Obj(), newNode("node-c").Obj()}
	w := newWorld(t, interceptor.Funcs{}, nodes...)
	var got []string
	for _, req := range w.r.allNodes(context.Background(), defaultPolicy(nil)) {
		got = append(got, req.Name)
	}
	slices.Sort(got)
	if want := []string{"node-a", "node-b", "node-c"}; !slices.Equal(got, want) {
		t.Errorf("woke %v, want %v", got, want)
	}
	failing := newWorld(t, failOn("list", &corev1.NodeList{}, apierrors.NewServiceUnavailable("etcd is away")), nodes...)
	if reqs := failing.r.allNodes(context.Background(), defaultPolicy(nil)); len(reqs) != 0 {
		t.Errorf("woke %v while the nodes could not be listed, want none", reqs)
	}
}
