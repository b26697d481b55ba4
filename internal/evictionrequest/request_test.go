package evictionrequest

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestProgressSaysWhoHasTheTurn: a drain's blocker says which responder has
// the turn, its message first (a status cell keeps the start of it), then
// since when and when it expects to be done; how the Eviction ended; or
// that there is none yet. It never says how long ago (each change is a
// status write).
func TestProgressSaysWhoHasTheTurn(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC))
	active := &lifecyclev1alpha1.Eviction{Status: lifecyclev1alpha1.EvictionStatus{
		TargetResponders: []lifecyclev1alpha1.TargetResponder{
			{Name: "backup.example.com/mover", State: lifecyclev1alpha1.ResponderStateActive},
			{Name: Evictor, State: lifecyclev1alpha1.ResponderStateInactive}},
		Responders: []lifecyclev1alpha1.ResponderStatus{{Name: "backup.example.com/mover", StartTime: &start, HeartbeatTime: &start,
			ExpectedCompletionTime: ptr.To(metav1.NewTime(start.Add(time.Hour))), Message: ptr.To("moving 3 of 7 shards")}, {Name: Evictor}},
	}}
	ended := &lifecyclev1alpha1.Eviction{Status: lifecyclev1alpha1.EvictionStatus{Conditions: []metav1.Condition{
		{Type: string(lifecyclev1alpha1.EvictionConditionFailed), Status: metav1.ConditionTrue, Reason: "CanceledDueToNoRequesters", Message: "no requester wants it"}}}}
	waiting := &lifecyclev1alpha1.Eviction{Status: lifecyclev1alpha1.EvictionStatus{TargetResponders: []lifecyclev1alpha1.TargetResponder{
		{Name: Evictor, State: lifecyclev1alpha1.ResponderStateInactive}}}}
	for _, c := range []struct {
		name string
		ev   *lifecyclev1alpha1.Eviction
		want string
	}{
		{"active", active, "responder backup.example.com/mover has the turn: moving 3 of 7 shards (since 2026-11-29T08:00:00Z, expects to complete by 2026-11-29T09:00:00Z)"},
		{"ended", ended, "its Eviction ended Failed (CanceledDueToNoRequesters): no requester wants it"},
		{"no turn given yet", waiting, "its Eviction waits for its coordinator to give a responder the turn"},
		{"none", nil, "no Eviction yet: is a coordinator running"},
	} {
		if got := Progress(c.ev); !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestADrainsRequest: one per pod (named by its UID), owned by the drain,
// asking; Ours holds for the drains' request of that pod only (not a later
// pod of the name, not another requester's under the same name, not one
// being deleted), withdrawn or not.
func TestADrainsRequest(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0", UID: "0b6c2f1e-9d57-4c42-9a55-5f0c1f1f7a11"}}
	owner := metav1.OwnerReference{APIVersion: "vacate.dev/v1alpha1", Kind: "NodeDrain", Name: "node-1", UID: "d"}
	req := DrainRequest(pod, owner)
	if req.Name != "vacate-drain-"+string(pod.UID) || req.Namespace != "shop" || req.Spec.Requester != DrainRequester ||
		req.OwnerReferences[0] != owner || req.Spec.Intent != lifecyclev1alpha1.EvictionRequestIntentEviction {
		t.Errorf("the drain's request: %+v", req)
	}
	if !Ours(req, pod) {
		t.Error("Ours: false for its own pod")
	}
	later := pod.DeepCopy()
	later.UID = types.UID("5e1f0a57-0d6b-4f0e-8e0c-3c5a8f1b2d22")
	if Ours(req, later) {
		t.Error("Ours: true for a later pod of the same name")
	}
	squatted := req.DeepCopy()
	squatted.Spec.Requester = "tenant.example.com/squat"
	if Ours(squatted, pod) {
		t.Error("Ours: true for another requester's request under the drains' name")
	}
	req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
	if !Ours(req, pod) {
		t.Error("Ours: false once withdrawn (the drain asks again with it)")
	}
	req.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if Ours(req, pod) {
		t.Error("Ours: true for one being deleted")
	}
}

// TestWantedByOthers: another requester still asking; the drain's own, or
// another's withdrawn, does not count.
func TestWantedByOthers(t *testing.T) {
	ev := &lifecyclev1alpha1.Eviction{Status: lifecyclev1alpha1.EvictionStatus{Requesters: []lifecyclev1alpha1.Requester{
		{Name: DrainRequester, Intent: lifecyclev1alpha1.RequesterIntentEviction},
		{Name: "descheduler.example.com/x", Intent: lifecyclev1alpha1.RequesterIntentWithdrawn}}}}
	if WantedByOthers(ev, DrainRequester) {
		t.Error("wanted by others: only the drain and a withdrawn one ask")
	}
	ev.Status.Requesters[1].Intent = lifecyclev1alpha1.RequesterIntentEviction
	if !WantedByOthers(ev, DrainRequester) {
		t.Error("not wanted by others, though the descheduler asks")
	}
}
