package nodedrain

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

func TestProgressOnly(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	base := v1alpha1.NodeDrainStatus{
		Phase: v1alpha1.PhaseEvicting, Total: 10, Evicted: 2, Remaining: 8, Progress: "2/10",
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionPodsEvicted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonEvicting, Message: "8 to evict", LastTransitionTime: t0},
			{Type: v1alpha1.ConditionBlocked, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotBlocked, Message: "nothing blocks the drain", LastTransitionTime: t0},
		},
	}
	change := func(f func(*v1alpha1.NodeDrainStatus)) *v1alpha1.NodeDrainStatus {
		s := base.DeepCopy()
		f(s)
		return s
	}
	for _, tc := range []struct {
		name  string
		after *v1alpha1.NodeDrainStatus
		want  bool
	}{
		{"counts and their message", change(func(s *v1alpha1.NodeDrainStatus) {
			s.Evicted, s.Remaining, s.Progress = 3, 7, "3/10"
			s.Conditions[0].Message = "7 to evict"
		}), true},
		{"a pod arrived", change(func(s *v1alpha1.NodeDrainStatus) { s.Total, s.Remaining, s.Progress = 11, 9, "2/11" }), true},
		{"phase", change(func(s *v1alpha1.NodeDrainStatus) { s.Phase = v1alpha1.PhaseDrained }), false},
		{"condition status", change(func(s *v1alpha1.NodeDrainStatus) {
			s.Conditions[0].Status, s.Conditions[0].LastTransitionTime = metav1.ConditionTrue, metav1.NewTime(t0.Add(time.Minute))
		}), false},
		{"condition reason", change(func(s *v1alpha1.NodeDrainStatus) { s.Conditions[0].Reason = v1alpha1.ReasonAllEvicted }), false},
		{"a new condition", change(func(s *v1alpha1.NodeDrainStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: v1alpha1.ConditionDrained, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonDrained})
		}), false},
		{"a pod waits for its PDB", change(func(s *v1alpha1.NodeDrainStatus) {
			s.Blocked, s.Blockers = 1, []v1alpha1.Blocker{{Pod: "ns/p", Reason: v1alpha1.BlockerPDB}}
			s.Conditions[1].Status, s.Conditions[1].Reason, s.Conditions[1].Message = metav1.ConditionTrue, v1alpha1.ReasonBlocked, "1 pod(s) blocked"
		}), true},
		{"a blocker of another kind", change(func(s *v1alpha1.NodeDrainStatus) {
			s.Blocked, s.Blockers = 1, []v1alpha1.Blocker{{Pod: "ns/p", Reason: v1alpha1.BlockerForbidden}}
			s.Conditions[1].Status, s.Conditions[1].Reason, s.Conditions[1].Message = metav1.ConditionTrue, v1alpha1.ReasonBlocked, "1 pod(s) blocked"
		}), false},
	} {
		if got := progressOnly(&base, tc.after); got != tc.want {
			t.Errorf("%s: progressOnly = %v, want %v", tc.name, got, tc.want)
		}
	}

	// A drain already blocked by a pod of another kind: more pods waiting
	// for their PDBs is progress.
	blocked := change(func(s *v1alpha1.NodeDrainStatus) {
		s.Blocked, s.Blockers = 1, []v1alpha1.Blocker{{Pod: "ns/p", Reason: v1alpha1.BlockerForbidden}}
		s.Conditions[1].Status, s.Conditions[1].Reason, s.Conditions[1].Message = metav1.ConditionTrue, v1alpha1.ReasonBlocked, "1 pod(s) blocked"
	})
	more := blocked.DeepCopy()
	more.Blocked, more.Blockers = 2, append(more.Blockers, v1alpha1.Blocker{Pod: "ns/q", Reason: v1alpha1.BlockerPDB})
	more.Conditions[1].Message = "2 pod(s) blocked"
	if !progressOnly(blocked, more) {
		t.Error("a drain blocked by a pod of another kind: one more pod waiting for a PDB is not progress")
	}
	unblocked := blocked.DeepCopy()
	unblocked.Blocked, unblocked.Blockers = 0, nil
	unblocked.Conditions[1].Status, unblocked.Conditions[1].Reason = metav1.ConditionFalse, v1alpha1.ReasonNotBlocked
	if progressOnly(blocked, unblocked) {
		t.Error("the pod of another kind no longer blocking is progress")
	}
}

func TestStatusWritesSpaceOutProgress(t *testing.T) {
	var w statusWrites
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	if d := w.wait("a", t0); d != 0 {
		t.Errorf("a drain never written waits %s, want 0", d)
	}
	w.wrote("a", t0)
	if d := w.wait("a", t0.Add(300*time.Millisecond)); d != progressInterval-300*time.Millisecond {
		t.Errorf("300 ms after a write: wait %s, want %s", d, progressInterval-300*time.Millisecond)
	}
	if d := w.wait("b", t0.Add(300*time.Millisecond)); d != 0 {
		t.Errorf("another drain waits %s, want 0", d)
	}
	if d := w.wait("a", t0.Add(progressInterval)); d != 0 {
		t.Errorf("an interval after the write: wait %s, want 0", d)
	}
	w.wrote("b", t0.Add(2*progressInterval))
	if _, kept := w.last["a"]; kept {
		t.Error("a write that holds nothing back any more is still remembered")
	}
}

// TestProgressUpdateWakesNoPass: an update of a drain that changed only its
// progress (the controller's own progress writes; the watch delivers most
// before the write has returned) wakes no pass; a change of anything else
// of the drain does.
func TestProgressUpdateWakesNoPass(t *testing.T) {
	old := testutil.NodeDrain("n1", "", "cli:test")
	old.ResourceVersion = "5"
	old.Finalizers = []string{v1alpha1.FinalizerRestore}
	old.Status.Phase, old.Status.Total, old.Status.Evicted, old.Status.Remaining = v1alpha1.PhaseEvicting, 10, 2, 8
	meta.SetStatusCondition(&old.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPodsEvicted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonEvicting, Message: "2 of 10 evicted"})
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.NodeDrain)
		pass   bool
	}{
		{"the counts and their message", func(nd *v1alpha1.NodeDrain) {
			nd.Status.Evicted, nd.Status.Remaining, nd.Status.Progress = 3, 7, "3/10"
			meta.SetStatusCondition(&nd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPodsEvicted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonEvicting, Message: "3 of 10 evicted"})
		}, false},
		{"the phase", func(nd *v1alpha1.NodeDrain) { nd.Status.Phase = v1alpha1.PhaseDrained }, true},
		{"a condition's reason", func(nd *v1alpha1.NodeDrain) {
			meta.SetStatusCondition(&nd.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionPodsEvicted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllEvicted})
		}, true},
		{"a blocker that is not a PDB's", func(nd *v1alpha1.NodeDrain) {
			nd.Status.Blockers = []v1alpha1.Blocker{{Pod: "shop/web-1", Reason: v1alpha1.BlockerThrottled}}
		}, true},
		{"the finalizers", func(nd *v1alpha1.NodeDrain) { nd.Finalizers = nil }, true},
		{"the deletion", func(nd *v1alpha1.NodeDrain) { nd.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
		{"an annotation", func(nd *v1alpha1.NodeDrain) { nd.Annotations = map[string]string{"example.com/x": "y"} }, true},
		{"the spec", func(nd *v1alpha1.NodeDrain) { nd.Spec.Requesters = nil; nd.Generation++ }, true},
	} {
		cur := old.DeepCopy()
		cur.ResourceVersion = "6"
		tc.change(cur)
		if got := !progressUpdate(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.pass {
			t.Errorf("%s changed: pass %t, want %t", tc.name, got, tc.pass)
		}
	}
}

// TestHoldBackWakesOnceUnlessWritten: progress held back wakes one pass of
// the drain after the wait, however often it is held back meanwhile; a
// write before then cancels the wake-up.
func TestHoldBackWakesOnceUnlessWritten(t *testing.T) {
	var w statusWrites
	wakes := make(chan types.UID, 10)
	wake := func(uid types.UID) func() { return func() { wakes <- uid } }
	const wait = 20 * time.Millisecond
	w.holdBack("a", wait, wake("a"))
	w.holdBack("a", wait, wake("a")) // already arranged
	w.holdBack("b", wait, wake("b"))
	w.wrote("b", time.Now()) // b's progress was written by another pass
	select {
	case uid := <-wakes:
		if uid != "a" {
			t.Fatalf("drain %s was woken, want a", uid)
		}
	case <-time.After(time.Minute):
		t.Fatal("the held-back progress of drain a never woke a pass")
	}
	// Well past the wait: nothing else comes (a's second hold-back joined
	// the first; b's write cancelled its wake-up).
	time.Sleep(10 * wait)
	if n := len(wakes); n != 0 {
		t.Errorf("%d more wake-ups, want none", n)
	}
	w.holdBack("a", wait, wake("a")) // after the wake-up, a new hold-back arranges a new one
	select {
	case <-wakes:
	case <-time.After(time.Minute):
		t.Fatal("a second hold-back after the first wake-up never woke a pass")
	}
}
