package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// player plays the coordinator's decision (internal/evictionrequest's Next)
// against the real API server, with no controller running: it writes each
// status Next computes, so the API server's validation of Evictions (the
// state machine, the present times, the final conditions) judges every
// write, one step at a time.
type player struct {
	t      *testing.T
	client kubernetes.Interface
	facts  er.Facts
}

func newPlayer(t *testing.T, withResponder bool) *player {
	t.Helper()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	ns := testenv.Namespace(t, c)
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	pod := devcluster.BarePod(ns, "target", "nowhere")
	if withResponder {
		pod.Spec.EvictionResponders = []corev1.EvictionResponder{{Name: operator, Priority: ptr.To[int32](10000)}}
	}
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{
			Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: pod.Name, UID: pod.UID}},
			Requester: "example.com/descheduler", Intent: lifecyclev1alpha1.EvictionRequestIntentEviction,
		},
	}
	if req, err = c.Client.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := er.Eviction(pod, []lifecyclev1alpha1.EvictionRequest{*req})
	if ev, err = c.Client.LifecycleV1alpha1().Evictions(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &player{t: t, client: c.Client, facts: er.Facts{Pod: pod, Requests: []lifecyclev1alpha1.EvictionRequest{*req}, Eviction: ev}}
}

// step writes Next's status at the present time, and each request's
// RequestStatus; the API server must accept them.
func (c *player) step(what string) bool {
	c.t.Helper()
	ctx := context.Background()
	c.facts.Now = time.Now()
	status, evict := er.Next(c.facts)
	ev := c.facts.Eviction.DeepCopy()
	ev.Status = status
	stored, err := c.client.LifecycleV1alpha1().Evictions(ev.Namespace).UpdateStatus(ctx, ev, metav1.UpdateOptions{})
	if err != nil {
		c.t.Fatalf("%s: the API server refused Next's status: %v", what, err)
	}
	c.facts.Eviction = stored
	for i, req := range c.facts.Requests {
		req.Status = er.RequestStatus(&req, stored)
		got, err := c.client.LifecycleV1alpha1().EvictionRequests(req.Namespace).UpdateStatus(ctx, &req, metav1.UpdateOptions{})
		if err != nil {
			c.t.Fatalf("%s: the API server refused the request's status: %v", what, err)
		}
		c.facts.Requests[i] = *got
	}
	return evict
}

// respond writes what the Active responder reports, as a responder would.
func (c *player) respond(name string, report func(*lifecyclev1alpha1.ResponderStatus)) {
	c.t.Helper()
	ev := c.facts.Eviction.DeepCopy()
	report(er.ResponderStatus(&ev.Status, name))
	stored, err := c.client.LifecycleV1alpha1().Evictions(ev.Namespace).UpdateStatus(context.Background(), ev, metav1.UpdateOptions{})
	if err != nil {
		c.t.Fatalf("%s's report refused: %v", name, err)
	}
	c.facts.Eviction = stored
}

func now() *metav1.Time { return ptr.To(metav1.Now()) }

// TestTheEvictionGoesWithItsLastRequest creates the Eviction of a pod asked
// for by two requests: the garbage collector deletes it when the second
// request is deleted, not the first.
func TestTheEvictionGoesWithItsLastRequest(t *testing.T) {
	c := newPlayer(t, true)
	ctx := testenv.Context(t)
	first := c.facts.Requests[0]
	second := first.DeepCopy()
	second.ObjectMeta = metav1.ObjectMeta{Name: first.Name + "-2", Namespace: first.Namespace}
	second.Spec.Requester = "example.com/autoscaler"
	second, err := c.client.LifecycleV1alpha1().EvictionRequests(first.Namespace).Create(ctx, second, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evictions := c.client.LifecycleV1alpha1().Evictions(first.Namespace)
	ev := c.facts.Eviction
	ev.OwnerReferences = er.Eviction(c.facts.Pod, []lifecyclev1alpha1.EvictionRequest{first, *second}).OwnerReferences
	if ev, err = evictions.Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := ev.Labels; got[operator] != "responder" || got[er.Evictor] != "responder" || got["example.com/descheduler"] != "requester" {
		t.Errorf("the Eviction's labels %v, want each participant's role", got)
	}
	requests := c.client.LifecycleV1alpha1().EvictionRequests(first.Namespace)
	if err := requests.Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // time for a wrong garbage collection
	if _, err := evictions.Get(ctx, ev.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the Eviction went with its first request: %v", err)
	}
	if err := requests.Delete(ctx, second.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the garbage collector to delete the Eviction", func() error {
		_, err := evictions.Get(ctx, ev.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// TestTheAPIServerAcceptsNextsWrites walks Evictions through their turns on
// the real API server. Not here: an interruption on a stale heartbeat,
// which its validation allows only 20 real minutes after the last one
// (docs/dev/eviction-requests.md).
func TestTheAPIServerAcceptsNextsWrites(t *testing.T) {
	t.Run("a responder completes, then the evictor evicts", func(t *testing.T) {
		c := newPlayer(t, true)
		if c.step("the first turn") {
			t.Error("the evictor's turn before the operator's")
		}
		testutil.WantResponderStates(t, c.facts.Eviction.Status, operator+"=Active "+er.Evictor+"=Inactive ")
		c.respond(operator, func(r *lifecyclev1alpha1.ResponderStatus) {
			r.HeartbeatTime, r.Message = now(), ptr.To("moving data")
		})
		c.respond(operator, func(r *lifecyclev1alpha1.ResponderStatus) { r.CompletionTime = now() })
		if !c.step("the handover to the evictor") {
			t.Error("the evictor's turn came and Next did not say so")
		}
		testutil.WantResponderStates(t, c.facts.Eviction.Status, operator+"=Completed "+er.Evictor+"=Active ")
		c.respond(er.Evictor, func(r *lifecyclev1alpha1.ResponderStatus) { r.CompletionTime = now() })
		c.step("the evictor's turn ends, its pod still seen")
		testutil.WantResponderStates(t, c.facts.Eviction.Status, operator+"=Completed "+er.Evictor+"=Completed ")
		c.facts.Pod = nil
		c.step("the end, the pod evicted")
		testutil.WantResponderStates(t, c.facts.Eviction.Status, operator+"=Completed "+er.Evictor+"=Completed ")
		testutil.WantEvictionCondition(t, c.facts.Eviction.Status, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodDeleted)
		req := c.facts.Requests[0]
		if cond := meta.FindStatusCondition(req.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted)); cond == nil || cond.Reason != string(lifecyclev1alpha1.EvictionConditionReasonPodDeleted) || ptr.Deref(req.Status.ObservedGeneration, 0) != req.Generation {
			t.Errorf("the request's status %+v, want TargetEvicted PodDeleted at its generation", req.Status)
		}
	})
	for _, end := range []struct {
		name   string
		change func(*er.Facts)
		cond   lifecyclev1alpha1.EvictionConditionType
		reason lifecyclev1alpha1.EvictionConditionReason
	}{
		{"every requester withdraws", func(f *er.Facts) { f.Requests = nil }, lifecyclev1alpha1.EvictionConditionFailed, lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters},
		{"the pod is deleted during a responder's turn", func(f *er.Facts) { f.Pod = nil }, lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionReasonPodDeleted},
	} {
		t.Run(end.name, func(t *testing.T) {
			c := newPlayer(t, true)
			c.step("the first turn")
			end.change(&c.facts)
			c.step("the end")
			testutil.WantResponderStates(t, c.facts.Eviction.Status, operator+"=Canceled "+er.Evictor+"=Inactive ")
			testutil.WantEvictionCondition(t, c.facts.Eviction.Status, end.cond, end.reason)
		})
	}
	t.Run("an interruption before the heartbeat deadline is refused", func(t *testing.T) {
		c := newPlayer(t, true)
		c.step("the first turn")
		// What Next does at the deadline, written a few seconds after the
		// start: the API server must refuse it, or this test proves nothing
		// of the writes above.
		c.facts.Now = time.Now().Add(er.HeartbeatDeadline)
		early, _ := er.Next(c.facts)
		ev := c.facts.Eviction.DeepCopy()
		ev.Status = early
		er.ResponderStatus(&ev.Status, er.Evictor).StartTime = now()
		_, err := c.client.LifecycleV1alpha1().Evictions(ev.Namespace).UpdateStatus(context.Background(), ev, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), "must stay Active") {
			t.Errorf("an early interruption: %v, want the API server's refusal (must stay Active)", err)
		}
		t.Logf("refused: %v", err)
	})
	t.Run("a pod without responders", func(t *testing.T) {
		c := newPlayer(t, false)
		if !c.step("the first turn") {
			t.Error("the evictor's turn is first and Next did not say so")
		}
		testutil.WantResponderStates(t, c.facts.Eviction.Status, er.Evictor+"=Active ")
	})
}

// operator is the responder the played pods declare.
const operator = "example.com/operator"
