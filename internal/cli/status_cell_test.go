package cli

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// TestStatusSaysRunningAgain (issue 23): a drain that ended and runs again
// shows why in its phase cell and, -o wide, in WHY; an ended drain or a
// first run shows neither.
func TestStatusSaysRunningAgain(t *testing.T) {
	nd := &v1alpha1.NodeDrain{Spec: v1alpha1.NodeDrainSpec{NodeName: "n1", Requesters: []v1alpha1.Requester{{Name: "cli:alice"}}}}
	nd.Status.Phase = v1alpha1.PhaseEvicting
	if got := phaseCell(nd); got != "Evicting" {
		t.Errorf("first run: phase cell %q", got)
	}
	nd.Status.Run = &v1alpha1.DrainRun{Reason: v1alpha1.ReasonPodsArrived, Message: "1 pod(s) that must leave turned up on the node after it was Drained: shop/late"}
	if got := phaseCell(nd); got != "Evicting (again: PodsArrived)" {
		t.Errorf("running again: phase cell %q", got)
	}
	if got := why(nd); !strings.HasPrefix(got, "running again: 1 pod(s)") {
		t.Errorf("running again: why %q", got)
	}
	nd.Status.Phase = v1alpha1.PhasePending
	nd.Status.QueuePosition = 1
	nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "WaitingForSlot"}}
	if got := phaseCell(nd); got != "Queued #1 WaitingForSlot (again: PodsArrived)" {
		t.Errorf("queued again: phase cell %q", got)
	}
	nd.Status.Phase, nd.Status.Conditions = v1alpha1.PhaseDrained, nil
	if got := phaseCell(nd); got != "Drained" {
		t.Errorf("ended: phase cell %q", got)
	}
}
