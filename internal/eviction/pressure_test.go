package eviction

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// callCount is how many eviction calls the harness saw.
func (h *harness) callCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// waitCalls waits until the harness saw at least n eviction calls.
func (h *harness) waitCalls(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d eviction calls", n), func() error {
		if got := h.callCount(); got < n {
			return fmt.Errorf("%d eviction calls, want %d", got, n)
		}
		return nil
	})
}

// settled waits a moment of real time, for calls that should not come, and
// returns the count.
func (h *harness) settled() int {
	time.Sleep(100 * time.Millisecond)
	return h.callCount()
}

// The shared limiter bounds every eviction call, first attempts included:
// with the queue's clock standing still, no more than burst calls are made,
// and each second of the clock lets qps more through.
func TestEveryEvictionCallTakesAToken(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC))
	h := newHarnessWith(t, Options{Clock: clk, QPS: 2, Burst: 3, Workers: 10, PerNode: 10},
		func(*policyv1.Eviction, int) error { return nil }, true)
	for i := range 10 {
		if err := h.q.Add(PodRequest(testutil.Pod(fmt.Sprintf("web-%d", i)).OnNode("n1").Obj(), nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	h.waitCalls(t, 3)
	if n := h.settled(); n != 3 {
		t.Fatalf("%d eviction calls of first attempts with the clock standing still, want the burst (3)", n)
	}
	clk.Step(time.Second)
	h.waitCalls(t, 5)
	if n := h.settled(); n != 5 {
		t.Fatalf("%d eviction calls after 1s at 2 qps with a burst of 3, want 5", n)
	}
	for range 3 {
		clk.Step(time.Second)
	}
	h.waitCalls(t, 10)
	for range 10 {
		h.waitFor(t, Evicted)
	}
}

// A throttling 429 (no DisruptionBudget cause) backs off the whole client:
// no eviction call of any pod is made until its Retry-After has passed.
func TestThrottlingBacksOffEveryPod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC))
	h := newHarnessWith(t, Options{Clock: clk}, func(_ *policyv1.Eviction, call int) error {
		if call == 1 {
			return throttled(5)
		}
		return nil
	}, true)
	if err := h.q.Add(PodRequest(testutil.Pod("web-1").OnNode("n1").Obj(), nil, 0)); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, Throttled)
	for _, name := range []string{"web-2", "web-3"} {
		if err := h.q.Add(PodRequest(testutil.Pod(name).OnNode("n2").Obj(), nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.settled(); n != 1 {
		t.Fatalf("%d eviction calls right after a 429 with Retry-After 5s, want 1: other pods went on", n)
	}
	clk.Step(4 * time.Second)
	if n := h.settled(); n != 1 {
		t.Fatalf("%d eviction calls 4s after a 429 with Retry-After 5s, want 1", n)
	}
	clk.Step(time.Second)
	for range 3 {
		h.waitFor(t, Evicted)
	}
}

// A call that never returns does not park the worker: it ends at
// CallTimeout, is reported Failed and retried, and the other pods are
// evicted meanwhile, even with a single worker.
func TestHungEvictionCallTimesOut(t *testing.T) {
	var mu sync.Mutex
	hungCalls := 0
	// Like client-go against an API server that never answers: the call
	// returns only when its context ends.
	evict := func(ctx context.Context, ev *policyv1.Eviction) error {
		if ev.Name != "hung" {
			return nil
		}
		mu.Lock()
		hungCalls++
		mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	outcomes := make(chan Outcome, 100)
	q := NewQueueWithEvictor(evict, Options{Workers: 1, CallTimeout: 200 * time.Millisecond,
		BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
		OnOutcome: func(o Outcome) { outcomes <- o }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, name := range []string{"hung", "web-1", "web-2", "web-3"} {
		if err := q.Add(PodRequest(testutil.Pod(name).OnNode("n1").Obj(), nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	evicted, failed := 0, 0
	timeout := time.After(20 * time.Second)
	for evicted < 3 || failed < 2 {
		select {
		case o := <-outcomes:
			switch {
			case o.Result == Evicted:
				evicted++
			case o.Result == Failed && o.Pod.Name == "hung":
				failed++
			}
		case <-timeout:
			mu.Lock()
			n := hungCalls
			mu.Unlock()
			t.Fatalf("%d pod(s) evicted, want 3; the hung call was made %d time(s) and ended %d time(s), want it ended and retried", evicted, n, failed)
		}
	}
}
