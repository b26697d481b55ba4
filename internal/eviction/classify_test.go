package eviction

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// Messages the API server really sends (kube-apiserver 1.37,
// pkg/registry/core/pod/storage/eviction.go).
const (
	multiplePDBsMessage = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
	vapMessage          = `pods "web-1" is forbidden: ValidatingAdmissionPolicy 'no-evict' with binding 'no-evict' denied request: evictions are frozen`
)

// throttled is a 429 as API Priority and Fairness sends it: no
// DisruptionBudget cause, a Retry-After.
func throttled(retryAfter int) error {
	return apierrors.NewTooManyRequests("Too many requests, please try again later.", retryAfter)
}

// pdbForbidden is the 403 of kube-apiserver 1.37 for a PDB with too many
// evictions its controller has not confirmed.
func pdbForbidden() error {
	err := apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), "web",
		errors.New("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type:    policyv1.DisruptionBudgetCause,
		Message: "The disruption budget web does not allow evicting pods currently: too many pending evictions not confirmed by PDB controller",
	})
	return err
}

func TestRefusalsAreClassifiedByTypeAndRetried(t *testing.T) {
	// A ValidatingAdmissionPolicy that denies with reason Invalid.
	invalid := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid, Message: vapMessage}}
	cases := []struct {
		name    string
		err     error
		want    Result
		message string
		code    int32
		is      func(error) bool
	}{
		{name: "429 with DisruptionBudget cause", err: pdbRefusal(), want: PDBBlocked,
			message: "The disruption budget web needs 4 healthy pods and has 4 currently", code: http.StatusTooManyRequests, is: apierrors.IsTooManyRequests},
		{name: "429 without cause", err: throttled(0), want: Throttled,
			message: "Too many requests, please try again later.", code: http.StatusTooManyRequests, is: apierrors.IsTooManyRequests},
		{name: "403", err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden,
			Reason: metav1.StatusReasonForbidden, Message: vapMessage}}, want: Forbidden, message: vapMessage, code: http.StatusForbidden, is: apierrors.IsForbidden},
		// Since 1.37 the PDB's own 403s (a negative disruptionsAllowed, too
		// many evictions the PDB controller has not confirmed) carry the
		// DisruptionBudget cause: the budget refuses, not a policy.
		{name: "403 with DisruptionBudget cause", err: pdbForbidden(), want: PDBBlocked,
			message: "The disruption budget web does not allow evicting pods currently: too many pending evictions not confirmed by PDB controller",
			code:    http.StatusForbidden, is: apierrors.IsForbidden},
		{name: "422", err: invalid, want: Invalid, message: invalid.ErrStatus.Message, code: http.StatusUnprocessableEntity, is: apierrors.IsInvalid},
		// As the API server sends it: a 500 without a reason.
		{name: "500", err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: multiplePDBsMessage}}, want: Failed, message: multiplePDBsMessage, code: http.StatusInternalServerError, is: apierrors.IsInternalError},
		{name: "503", err: apierrors.NewServiceUnavailable("etcd leader changed"), want: Failed,
			message: "etcd leader changed", code: http.StatusServiceUnavailable, is: apierrors.IsServiceUnavailable},
		{name: "no answer", err: errors.New("connection refused"), want: Failed, message: "connection refused", code: 0,
			is: func(err error) bool { return err != nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Options{}, func(_ *policyv1.Eviction, call int) error {
				if call == 1 {
					return c.err
				}
				return nil
			})
			if err := h.q.Add(PodRequest(testutil.Pod("web-1").Obj(), nil, 0)); err != nil {
				t.Fatal(err)
			}
			o := h.waitFor(t, c.want)
			if o.Message != c.message || o.Code != c.code {
				t.Errorf("%s outcome message %q code %d, want %q code %d", o.Result, o.Message, o.Code, c.message, c.code)
			}
			if !c.is(o.Err) {
				t.Errorf("%s outcome error %v does not keep the API error's type", o.Result, o.Err)
			}
			h.waitFor(t, Evicted) // retried
		})
	}
}

func TestThrottledRetryHonoursRetryAfter(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC))
	h := newHarness(t, Options{Clock: clk}, func(_ *policyv1.Eviction, call int) error {
		if call == 1 {
			return throttled(30)
		}
		return nil
	})
	if err := h.q.Add(PodRequest(testutil.Pod("web-1").Obj(), nil, 0)); err != nil {
		t.Fatal(err)
	}
	if o := h.waitFor(t, Throttled); o.RetryAfter != 30*time.Second {
		t.Errorf("RetryAfter = %s, want 30s", o.RetryAfter)
	}
	clk.Step(29 * time.Second) // the backoff (1ms) is long over, Retry-After is not
	time.Sleep(50 * time.Millisecond)
	h.mu.Lock()
	calls := len(h.calls)
	h.mu.Unlock()
	if calls != 1 {
		t.Fatalf("%d eviction calls 29s after a Retry-After of 30s, want 1", calls)
	}
	clk.Step(time.Second)
	h.waitFor(t, Evicted)
}

func TestMayEvictHoldsAPodQueuedBeforeTheHold(t *testing.T) {
	var held atomic.Bool
	var asked atomic.Int32
	h := newHarness(t, Options{PerNode: 1, MayEvict: func(r Request) (bool, string) {
		asked.Add(1)
		if held.Load() && r.Pod.Name == "web-1" {
			return false, "evacuation n1.volumes protects it"
		}
		return true, ""
	}}, func(ev *policyv1.Eviction, _ int) error {
		if ev.Name == "web-1" {
			// The hold arrives while the pod is in flight: the refusal
			// queues it again, and its retry (after a backoff of a
			// millisecond) must be held. Set after the refusal was seen,
			// the retry could come first.
			held.Store(true)
			return pdbRefusal()
		}
		return nil
	})
	pod := testutil.Pod("web-1").OnNode("n1").Obj()
	if err := h.q.Add(PodRequest(pod, nil, 0)); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, PDBBlocked) // queued, asked, called, and queued again
	o := h.waitFor(t, Held)
	if o.UID != pod.UID || o.Message != "evacuation n1.volumes protects it" || o.Err != nil {
		t.Errorf("Held outcome %+v", o)
	}
	h.mu.Lock()
	calls := len(h.calls)
	h.mu.Unlock()
	if calls != 1 {
		t.Errorf("%d eviction calls, want 1: none once the guard said no", calls)
	}
	if h.q.Pending(pod.UID) {
		t.Error("a held pod is still queued")
	}
	// The held request gave its node's only slot back.
	if err := h.q.Add(PodRequest(testutil.Pod("web-2").OnNode("n1").Obj(), nil, 0)); err != nil {
		t.Fatal(err)
	}
	if o := h.waitFor(t, Evicted); o.Pod.Name != "web-2" {
		t.Errorf("evicted %s, want web-2", o.Pod)
	}
	if asked.Load() < 3 {
		t.Errorf("MayEvict asked %d times, want once before each call and once for the held pod", asked.Load())
	}
}
