package admission

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// TestANewRunIsAdmittedAfresh: when the NodeDrain controller counts a new
// run, the last run's admission is not this run's (Admitted is false, no
// hold is reported), and admission's next write starts the run's own
// record: a new request time, no start time; a later write for the same
// run keeps them.
func TestANewRunIsAdmittedAfresh(t *testing.T) {
	earlier, now := metav1.NewTime(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)), time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	nd := &v1alpha1.NodeDrain{}
	nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted}}
	nd.Status.StartTime, nd.Status.RequestTime = &earlier, &earlier
	if !nd.Admitted() {
		t.Fatal("a drain admitted for its current run is not Admitted")
	}
	nd.Status.RunNumber = 1 // runAgain, or a request after an undo
	if nd.Admitted() || nd.AdmissionHold() != nil {
		t.Fatalf("the last run's admission counts for the new run: admitted %t, hold %v", nd.Admitted(), nd.AdmissionHold())
	}
	forRun(nd, now)
	st := nd.Status
	if st.AdmittedRun != 1 || st.StartTime != nil || st.RequestTime == nil || !st.RequestTime.Time.Equal(now) {
		t.Fatalf("after admission's write: admittedRun %d, start %v, request %v; want 1, none, %s", st.AdmittedRun, st.StartTime, st.RequestTime, now)
	}
	forRun(nd, now.Add(time.Minute))
	if !nd.Status.RequestTime.Time.Equal(now) {
		t.Errorf("a second write for the same run moved its request time to %s", nd.Status.RequestTime)
	}
}
