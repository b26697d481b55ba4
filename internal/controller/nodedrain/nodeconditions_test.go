package nodedrain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// TestNodeConditionsChangeWithThePhaseNotEachEviction: the Node's drain
// conditions follow the drain's phase and the kind of its first blocker;
// an eviction more, or another pod blocked for the same reason, changes
// nothing (each change is a write of the Node, which wakes every watcher of
// Nodes). None before admission or once undone; both False when it failed.
func TestNodeConditionsChangeWithThePhaseNotEachEviction(t *testing.T) {
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	at := func(phase v1alpha1.DrainPhase, evicted int32, blockers ...v1alpha1.Blocker) []corev1.NodeCondition {
		d := nd.DeepCopy()
		d.Status.Phase, d.Status.Evicted, d.Status.Total, d.Status.Blockers = phase, evicted, 10, blockers
		return nodeConditions(d)
	}
	pdb := func(pod string) v1alpha1.Blocker { return v1alpha1.Blocker{Pod: pod, Reason: v1alpha1.BlockerPDB} }
	if !equality.Semantic.DeepEqual(at(v1alpha1.PhaseEvicting, 3, pdb("shop/web-1")), at(v1alpha1.PhaseEvicting, 7, pdb("shop/web-2"), pdb("shop/web-3"))) {
		t.Error("the conditions changed with the progress or the blocked pod's name")
	}
	evicting := at(v1alpha1.PhaseEvicting, 3, pdb("shop/web-1"))
	if len(evicting) != 2 || evicting[0].Type != corev1.NodeDrainInProgress || evicting[0].Status != corev1.ConditionTrue ||
		evicting[0].Message != "vacate NodeDrain n1: Evicting; blocked: "+v1alpha1.BlockerPDB+" (vacate explain n1)" ||
		evicting[1].Type != corev1.NodeDrained || evicting[1].Status != corev1.ConditionFalse {
		t.Errorf("while evicting: %+v", evicting)
	}
	if equality.Semantic.DeepEqual(evicting, at(v1alpha1.PhaseEvicting, 3)) {
		t.Error("a drain no longer blocked says the same")
	}
	drained := at(v1alpha1.PhaseDrained, 10)
	if len(drained) != 2 || drained[0].Status != corev1.ConditionFalse || drained[1].Status != corev1.ConditionTrue {
		t.Errorf("drained: %+v", drained)
	}
	failed := at(v1alpha1.PhaseFailed, 2)
	if len(failed) != 2 || failed[0].Status != corev1.ConditionFalse || failed[1].Status != corev1.ConditionFalse || failed[1].Reason != string(v1alpha1.PhaseFailed) {
		t.Errorf("failed: %+v", failed)
	}
	for _, p := range []v1alpha1.DrainPhase{"", v1alpha1.PhasePending, v1alpha1.PhaseRestoring} {
		if c := at(p, 0); c != nil {
			t.Errorf("phase %q: %+v, want none", p, c)
		}
	}
}
