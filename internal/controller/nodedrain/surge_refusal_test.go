package nodedrain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/policy"
)

// TestRefusedSurgeOutlivesALostStatusWrite: a refused create of a pod's
// replacement is not tried again before its time, even when the status
// recording it was lost (a write that conflicted, or a pass that read the
// drain from a stale cache): the controller remembers it, and writes the
// record again with the time of the refusal. Once the time passed, the
// create is tried again. A controller that restarted has only the status
// record, which it honours alike.
func TestRefusedSurgeOutlivesALostStatusWrite(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	d := drain.Decision{Pod: pod}
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Events: rec}
	pass := func(nd *v1alpha1.NodeDrain, at time.Time) (*scope, bool) {
		s := &scope{drain: nd, now: at, log: klog.Background(), policy: policy.Policy{SurgeReadyTimeout: 5 * time.Minute}}
		return s, r.surgeFailedWaits(s, d)
	}

	// The refusal, recorded in a status that was never written.
	r.surgeRefused.refuse(pod, t0, "vacate could not create its replacement: exceeded quota: pods")
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	s, waits := pass(nd, t0.Add(10*time.Second))
	if !waits {
		t.Fatal("10 s after a refused create whose record was lost, the create would be tried again")
	}
	got := surgeRecord(nd, "u1")
	if got == nil || got.Phase != v1alpha1.SurgeFailed || !got.Since.Time.Equal(t0) || got.Replacement != "" || !strings.Contains(got.Message, "exceeded quota") {
		t.Fatalf("the status record written again = %+v, want Failed since the refusal (%s), no replacement, its message", got, t0)
	}
	if b := s.surging[pod.UID]; b.Reason != v1alpha1.BlockerSurgeFailed || !strings.Contains(b.Detail, "trying again in 20s") {
		t.Errorf("blocker = %+v, want SurgeFailed, trying again in 20s", b)
	}
	for _, f := range s.onWritten {
		f()
	}
	r.recordPodEvents(s)
	if len(rec.Events) != 2 {
		t.Errorf("%d events once the record is written again, want the SurgeFailed event the lost write did not send, on the pod and on the drain", len(rec.Events))
	}

	// Its time passed: the create is tried again.
	if _, waits := pass(nd, t0.Add(31*time.Second)); waits {
		t.Error("31 s after the refusal, the create is not tried again")
	}

	// A restarted controller knows only the status record.
	r.surgeRefused = surgeRefusals{}
	restarted := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1alpha1.NodeDrainStatus{Surges: []v1alpha1.SurgeStatus{
		{Pod: "shop/web-1", PodUID: "u1", Phase: v1alpha1.SurgeFailed, Since: metav1.NewTime(t0), Message: "refused"},
	}}}
	if _, waits := pass(restarted, t0.Add(5*time.Second)); !waits {
		t.Error("a restarted controller tries the create again at once, despite the status record")
	}

	// A created replacement clears the memory of the refusal.
	r.surgeRefused.refuse(pod, t0, "refused")
	r.surgeRefused.forget(pod.UID)
	if _, waits := pass(&v1alpha1.NodeDrain{}, t0.Add(time.Second)); waits {
		t.Error("a refusal followed by a created replacement still holds the pod")
	}
	if len(r.surgeRefused.byPod) != 0 {
		t.Errorf("%d refusals kept once the replacement was created", len(r.surgeRefused.byPod))
	}
}
