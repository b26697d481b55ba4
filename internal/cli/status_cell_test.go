package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

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

// TestWatchRowsLineUp: under --watch each change is printed on its own by
// cli-runtime's table printer; the rows are padded so that their columns
// start where the listing's do (the listing reserves room for a queued
// phase).
func TestWatchRowsLineUp(t *testing.T) {
	var out strings.Builder
	o := &statusOptions{streams: Streams{Out: &out}, clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), watch: true}
	p, err := o.printer("", "", false)
	if err != nil {
		t.Fatal(err)
	}
	nd := func(name string, phase v1alpha1.DrainPhase, requester string) v1alpha1.NodeDrain {
		d := v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(990, 0))},
			Spec: v1alpha1.NodeDrainSpec{NodeName: name, Requesters: []v1alpha1.Requester{{Name: requester}}}}
		d.Status.Phase = phase
		return d
	}
	if err := p.list([]v1alpha1.NodeDrain{nd("n1", v1alpha1.PhaseDrained, "demo")}); err != nil {
		t.Fatal(err)
	}
	// A longer phase than any listed (a queued one), within the widths of
	// the listing.
	later := nd("n2", v1alpha1.PhasePending, "cli:bob")
	later.Status.QueuePosition = 3
	later.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "WaitingForPDBHeadroom"}}
	if err := p.row(&later); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed:\n%s", out.String())
	}
	header := lines[0]
	for _, col := range []string{"PHASE", "REQUESTERS", "AGE"} {
		at := strings.Index(header, col)
		for _, l := range lines[1:] {
			if at >= len(l) || l[at-1] != ' ' || l[at] == ' ' {
				t.Errorf("column %s starts at %d in the header, not in %q", col, at, l)
			}
		}
	}
	if strings.HasSuffix(lines[2], " ") {
		t.Errorf("trailing spaces: %q", lines[2])
	}
}
