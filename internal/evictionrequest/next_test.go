package evictionrequest

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const operator = "example.com/operator"

func responderPod() *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{EvictionResponders: []corev1.EvictionResponder{{Name: operator, Priority: ptr.To[int32](10000)}}}}
}

func request(requester string, intent lifecyclev1alpha1.EvictionRequestIntent) lifecyclev1alpha1.EvictionRequest {
	return lifecyclev1alpha1.EvictionRequest{Spec: lifecyclev1alpha1.EvictionRequestSpec{Requester: requester, Intent: intent}}
}

var wants = []lifecyclev1alpha1.EvictionRequest{request("example.com/descheduler", lifecyclev1alpha1.EvictionRequestIntentEviction)}

// step runs Next and stores its status as the Eviction's, as the
// coordinator's write would.
func step(f *Facts) bool {
	status, evict := Next(*f)
	if f.Eviction == nil {
		f.Eviction = &lifecyclev1alpha1.Eviction{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	}
	f.Eviction.Status = status
	return evict
}

func TestNextHandsTheTurnOnByPriorityCompletionAndHeartbeat(t *testing.T) {
	f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
	if step(f) {
		t.Error("the evictor was called on before the operator's turn")
	}
	s := f.Eviction.Status
	testutil.WantResponderStates(t, s, operator+"=Active "+Evictor+"=Inactive ")
	if st := ResponderStatus(&s, operator).StartTime; st == nil || !st.Time.Equal(t0) {
		t.Errorf("the operator's startTime %v, want the present %v", st, t0)
	}
	if len(s.Requesters) != 1 || s.Requesters[0].Intent != lifecyclev1alpha1.RequesterIntentEviction {
		t.Errorf("requesters %v", s.Requesters)
	}

	// A heartbeat keeps the turn; a minute short of the deadline it is kept.
	ResponderStatus(&f.Eviction.Status, operator).HeartbeatTime = ptr.To(metav1.NewTime(t0.Add(time.Minute)))
	f.Now = t0.Add(time.Minute + HeartbeatDeadline - time.Second)
	if step(f) {
		t.Error("the evictor was called on while the operator's heartbeat is fresh")
	}
	testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Active "+Evictor+"=Inactive ")

	// At the deadline the operator is interrupted and the evictor's turn comes.
	f.Now = t0.Add(time.Minute + HeartbeatDeadline)
	if !step(f) {
		t.Error("the evictor's turn came and Next did not say so")
	}
	testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Interrupted "+Evictor+"=Active ")
	if st := ResponderStatus(&f.Eviction.Status, Evictor).StartTime; st == nil || !st.Time.Equal(f.Now) {
		t.Errorf("the evictor's startTime %v, want %v", st, f.Now)
	}

	// The pod goes (the evictor evicted it and said so): the Eviction ends.
	ResponderStatus(&f.Eviction.Status, Evictor).CompletionTime = ptr.To(metav1.NewTime(f.Now))
	f.Pod = nil
	if step(f) {
		t.Error("the evictor was called on for a pod that is gone")
	}
	testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Interrupted "+Evictor+"=Completed ")
	testutil.WantEvictionCondition(t, f.Eviction.Status, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodDeleted)

	// A final Eviction changes no more.
	before := testutil.ResponderStates(f.Eviction.Status)
	f.Now = f.Now.Add(time.Hour)
	step(f)
	if got := testutil.ResponderStates(f.Eviction.Status); got != before {
		t.Errorf("a final Eviction changed: %q to %q", before, got)
	}
}

func TestNextCompletedResponderPassesToTheEvictor(t *testing.T) {
	f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
	step(f)
	f.Now = t0.Add(time.Minute)
	ResponderStatus(&f.Eviction.Status, operator).CompletionTime = ptr.To(metav1.NewTime(f.Now))
	if !step(f) {
		t.Error("the evictor's turn came and Next did not say so")
	}
	testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Completed "+Evictor+"=Active ")
}

func TestNextPlainPodGoesStraightToTheEvictor(t *testing.T) {
	f := &Facts{Pod: &corev1.Pod{}, Requests: wants, Now: t0}
	if !step(f) {
		t.Error("a pod without responders: the evictor's turn is first")
	}
	testutil.WantResponderStates(t, f.Eviction.Status, Evictor+"=Active ")
}

func TestNextCancelsWhenEveryRequesterWithdraws(t *testing.T) {
	for _, tc := range []struct {
		name     string
		requests []lifecyclev1alpha1.EvictionRequest
	}{
		{"withdrawn", []lifecyclev1alpha1.EvictionRequest{request("example.com/descheduler", lifecyclev1alpha1.EvictionRequestIntentWithdrawn)}},
		{"request deleted", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
			step(f)
			f.Requests, f.Now = tc.requests, t0.Add(time.Minute)
			if step(f) {
				t.Error("the evictor was called on after every requester withdrew")
			}
			testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Canceled "+Evictor+"=Inactive ")
			testutil.WantEvictionCondition(t, f.Eviction.Status, lifecyclev1alpha1.EvictionConditionFailed, lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters)
			if r := f.Eviction.Status.Requesters; len(r) != 1 || r[0].Intent != lifecyclev1alpha1.RequesterIntentWithdrawn {
				t.Errorf("requesters %v, want the one, Withdrawn", r)
			}
		})
	}
	// No request that wants the eviction and no Eviction yet: nothing to start.
	status, evict := Next(Facts{Pod: responderPod(), Requests: []lifecyclev1alpha1.EvictionRequest{request("example.com/x", lifecyclev1alpha1.EvictionRequestIntentWithdrawn)}, Now: t0})
	if evict || len(status.TargetResponders) != 0 || len(status.Conditions) != 0 {
		t.Errorf("a withdrawn request alone started an Eviction: %+v", status)
	}
}

func TestNextEndsWhenThePodEnds(t *testing.T) {
	f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
	step(f)
	f.Pod.Status.Phase = corev1.PodSucceeded
	step(f)
	testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Canceled "+Evictor+"=Inactive ")
	testutil.WantEvictionCondition(t, f.Eviction.Status, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodTerminal)
}

func TestNextFailsWhenNoResponderIsLeft(t *testing.T) {
	f := &Facts{Pod: &corev1.Pod{}, Requests: wants, Now: t0}
	step(f)
	f.Now = t0.Add(HeartbeatDeadline)
	if step(f) {
		t.Error("the evictor was called on after its own turn was interrupted")
	}
	testutil.WantResponderStates(t, f.Eviction.Status, Evictor+"=Interrupted ")
	testutil.WantEvictionCondition(t, f.Eviction.Status, lifecyclev1alpha1.EvictionConditionFailed, lifecyclev1alpha1.EvictionConditionReasonNoFurtherResponder)
}

func TestRequestersKeepTheWantingOnesWithinTheLimit(t *testing.T) {
	var recorded []lifecyclev1alpha1.Requester
	for i := range maxRequesters {
		recorded = append(recorded, lifecyclev1alpha1.Requester{Name: fmt.Sprintf("example.com/old-%03d", i), Intent: lifecyclev1alpha1.RequesterIntentWithdrawn})
	}
	got := requesters(recorded, wants)
	if len(got) != maxRequesters || got[0].Name != "example.com/descheduler" || got[0].Intent != lifecyclev1alpha1.RequesterIntentEviction {
		t.Errorf("%d requesters, first %v: the one that wants the eviction must be kept", len(got), got[0])
	}
}

func TestRequestStatusFollowsItsEviction(t *testing.T) {
	req := &lifecyclev1alpha1.EvictionRequest{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	if s := RequestStatus(req, nil); ptr.Deref(s.ObservedGeneration, 0) != 2 || len(s.Conditions) != 0 {
		t.Errorf("before its Eviction exists: %+v, want generation 2 seen and no condition", s)
	}
	f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
	step(f)
	if s := RequestStatus(req, f.Eviction); len(s.Conditions) != 0 {
		t.Errorf("while its Eviction is under way: conditions %v, want none", s.Conditions)
	}
	f.Requests = nil
	step(f)
	req.Status = RequestStatus(req, f.Eviction)
	c := meta.FindStatusCondition(req.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed))
	if c == nil || c.Reason != string(lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters) || c.ObservedGeneration != 2 {
		t.Errorf("after the cancel: %+v, want Failed CanceledDueToNoRequesters at generation 2", c)
	}
	// A new Eviction of the target (the request wants it again): the old
	// outcome goes.
	again := &Facts{Pod: responderPod(), Requests: wants, Now: t0.Add(time.Hour)}
	step(again)
	if s := RequestStatus(req, again.Eviction); len(s.Conditions) != 0 {
		t.Errorf("with a new Eviction under way: conditions %v, want none", s.Conditions)
	}
}

func TestEvictionNamesEveryParticipant(t *testing.T) {
	pod := responderPod()
	pod.Name, pod.Namespace, pod.UID = "db-0", "shop", "uid-1"
	requests := []lifecyclev1alpha1.EvictionRequest{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "ra"}, Spec: lifecyclev1alpha1.EvictionRequestSpec{Requester: "example.com/descheduler"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "rb"}, Spec: lifecyclev1alpha1.EvictionRequestSpec{Requester: operator}},
		// A second request of a plain requester keeps it a requester.
		{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "rc"}, Spec: lifecyclev1alpha1.EvictionRequestSpec{Requester: "example.com/descheduler"}},
	}
	ev := Eviction(pod, requests)
	want := map[string]string{"example.com/descheduler": "requester", operator: "requester-responder", Evictor: "responder"}
	if fmt.Sprint(ev.Labels) != fmt.Sprint(want) {
		t.Errorf("labels %v, want %v", ev.Labels, want)
	}
	if len(ev.OwnerReferences) != 3 || ev.OwnerReferences[1].UID != "rb" || ev.Spec.Target.Pod.UID != "uid-1" || ev.Namespace != "shop" {
		t.Errorf("owners %v, target %v in %q: want the three requests and the pod", ev.OwnerReferences, ev.Spec.Target.Pod, ev.Namespace)
	}
}

// Found by review: the cases below are what another writer, an informer's
// list order or a cache that lags can hand Next.
func TestNextOnWhatOthersStoreAndCachesShow(t *testing.T) {
	t.Run("one requester, two requests, either order", func(t *testing.T) {
		wantsIt := request("example.com/d", lifecyclev1alpha1.EvictionRequestIntentEviction)
		withdrew := request("example.com/d", lifecyclev1alpha1.EvictionRequestIntentWithdrawn)
		for _, reqs := range [][]lifecyclev1alpha1.EvictionRequest{{wantsIt, withdrew}, {withdrew, wantsIt}} {
			got := requesters(nil, reqs)
			if len(got) != 1 || got[0].Intent != lifecyclev1alpha1.RequesterIntentEviction {
				t.Errorf("requesters %v, want example.com/d wanting the eviction", got)
			}
		}
	})
	t.Run("responders stored in another order", func(t *testing.T) {
		f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
		step(f)
		s := &f.Eviction.Status
		s.TargetResponders[0], s.TargetResponders[1] = s.TargetResponders[1], s.TargetResponders[0]
		ResponderStatus(s, operator).CompletionTime = ptr.To(metav1.NewTime(t0.Add(time.Minute)))
		f.Now = t0.Add(time.Minute)
		if !step(f) {
			t.Error("the evictor's turn came and Next did not say so")
		}
		testutil.WantResponderStates(t, f.Eviction.Status, operator+"=Completed "+Evictor+"=Active ")
	})
	t.Run("the evictor completed, the pod not yet seen going", func(t *testing.T) {
		f := &Facts{Pod: &corev1.Pod{}, Requests: wants, Now: t0}
		step(f)
		ResponderStatus(&f.Eviction.Status, Evictor).CompletionTime = ptr.To(metav1.NewTime(t0))
		step(f)
		testutil.WantResponderStates(t, f.Eviction.Status, Evictor+"=Completed ")
		if len(f.Eviction.Status.Conditions) != 0 {
			t.Errorf("conditions %v while the evicted pod is still seen, want none yet", f.Eviction.Status.Conditions)
		}
		step(f) // nothing Active: it waits for the pod
		if len(f.Eviction.Status.Conditions) != 0 {
			t.Errorf("conditions %v, want none until the pod is gone", f.Eviction.Status.Conditions)
		}
		f.Pod = nil
		step(f)
		testutil.WantEvictionCondition(t, f.Eviction.Status, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodDeleted)
	})
	t.Run("nothing Active and the evictor did not complete", func(t *testing.T) {
		f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
		step(f)
		f.Eviction.Status.TargetResponders[0].State = lifecyclev1alpha1.ResponderStateCompleted
		f.Eviction.Status.TargetResponders[1].State = lifecyclev1alpha1.ResponderStateInterrupted
		step(f)
		testutil.WantEvictionCondition(t, f.Eviction.Status, lifecyclev1alpha1.EvictionConditionFailed, lifecyclev1alpha1.EvictionConditionReasonNoFurtherResponder)
	})
	t.Run("observedGeneration never goes back, startTime never changes", func(t *testing.T) {
		f := &Facts{Pod: responderPod(), Requests: wants, Now: t0}
		step(f)
		f.Eviction.Status.ObservedGeneration = ptr.To[int64](5)
		started := metav1.NewTime(t0.Add(-time.Hour))
		ResponderStatus(&f.Eviction.Status, Evictor).StartTime = &started
		ResponderStatus(&f.Eviction.Status, operator).CompletionTime = ptr.To(metav1.NewTime(t0))
		step(f)
		if g := ptr.Deref(f.Eviction.Status.ObservedGeneration, 0); g != 5 {
			t.Errorf("observedGeneration %d, want 5 kept (generation is 1)", g)
		}
		if st := ResponderStatus(&f.Eviction.Status, Evictor).StartTime; !st.Equal(&started) {
			t.Errorf("the evictor's stored startTime %v was changed to %v", started, st)
		}
	})
}
