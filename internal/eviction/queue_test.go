package eviction

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// harness runs a queue against a fake clientset whose eviction answers come
// from answer, and collects outcomes.
type harness struct {
	q        *Queue
	mu       sync.Mutex
	outcomes []Outcome
	calls    []*policyv1.Eviction
	notify   chan Outcome
}

// The fake clientset serialises its reactors, so tests of parallelism inject
// the eviction call directly (parallel=true); the others go through the fake
// clientset's eviction subresource.
func newHarness(t *testing.T, opts Options, answer func(ev *policyv1.Eviction, call int) error) *harness {
	return newHarnessWith(t, opts, answer, false)
}

func newHarnessWith(t *testing.T, opts Options, answer func(ev *policyv1.Eviction, call int) error, parallel bool) *harness {
	t.Helper()
	h := &harness{notify: make(chan Outcome, 1000)}
	var calls atomic.Int32
	record := func(ev *policyv1.Eviction) error {
		h.mu.Lock()
		h.calls = append(h.calls, ev)
		h.mu.Unlock()
		return answer(ev, int(calls.Add(1)))
	}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		return true, nil, record(a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction))
	})
	evict := ClientEvictor(cs)
	if parallel {
		evict = func(_ context.Context, ev *policyv1.Eviction) error { return record(ev) }
	}
	if opts.BaseDelay == 0 {
		opts.BaseDelay, opts.MaxDelay = time.Millisecond, 5*time.Millisecond
	}
	opts.OnOutcome = func(o Outcome) {
		h.mu.Lock()
		h.outcomes = append(h.outcomes, o)
		h.mu.Unlock()
		h.notify <- o
	}
	h.q = NewQueueWithEvictor(evict, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.q.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// waitFor returns the next outcome with the given result.
func (h *harness) waitFor(t *testing.T, r Result) Outcome {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case o := <-h.notify:
			if o.Result == r {
				return o
			}
		case <-timeout:
			t.Fatalf("no %s outcome; got %+v", r, h.outcomes)
		}
	}
}

func pdbRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 4 healthy pods and has 4 currently",
	})
	return err
}

func TestEvictionSendsUIDPreconditionAndGracePeriod(t *testing.T) {
	h := newHarness(t, Options{}, func(*policyv1.Eviction, int) error { return nil })
	pod := testutil.Pod("web-1").OnNode("n1").Obj()
	if err := h.q.Add(PodRequest(pod, ptr.To[int64](30), 0)); err != nil {
		t.Fatal(err)
	}
	o := h.waitFor(t, Evicted)
	if o.UID != pod.UID || o.Node != "n1" {
		t.Errorf("outcome %+v", o)
	}
	ev := h.calls[0]
	if ev.Name != "web-1" || ev.Namespace != "default" {
		t.Errorf("evicted %s/%s", ev.Namespace, ev.Name)
	}
	if ev.DeleteOptions.Preconditions == nil || *ev.DeleteOptions.Preconditions.UID != pod.UID {
		t.Errorf("no UID precondition: %+v", ev.DeleteOptions)
	}
	if *ev.DeleteOptions.GracePeriodSeconds != 30 {
		t.Errorf("grace period %d, want 30", *ev.DeleteOptions.GracePeriodSeconds)
	}
	if h.q.Pending(pod.UID) {
		t.Error("pod still pending after it was evicted")
	}
	// The informer may not show the pod terminating yet; adding it again
	// must not evict it a second time.
	if err := h.q.Add(PodRequest(pod, nil, 0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(h.calls); n != 1 {
		t.Errorf("%d eviction calls, want 1", n)
	}
}

func TestZeroGracePeriodIsRefused(t *testing.T) {
	h := newHarness(t, Options{}, func(*policyv1.Eviction, int) error { return nil })
	err := h.q.Add(PodRequest(testutil.Pod("web-1").Obj(), ptr.To[int64](0), 0))
	if !errors.Is(err, ErrZeroGracePeriod) {
		t.Fatalf("Add with grace 0 = %v, want ErrZeroGracePeriod", err)
	}
}

func TestPDBRefusalIsRetriedWithBackoffUntilAllowed(t *testing.T) {
	h := newHarness(t, Options{}, func(_ *policyv1.Eviction, call int) error {
		if call <= 3 {
			return pdbRefusal()
		}
		return nil
	})
	pod := testutil.Pod("web-1").OnNode("n1").Obj()
	if err := h.q.Add(PodRequest(pod, nil, 0)); err != nil {
		t.Fatal(err)
	}
	blocked := h.waitFor(t, PDBBlocked)
	if blocked.Message != "The disruption budget web needs 4 healthy pods and has 4 currently" {
		t.Errorf("message = %q", blocked.Message)
	}
	h.waitFor(t, Evicted)
	if n := len(h.calls); n != 4 {
		t.Errorf("%d calls, want 3 refusals and 1 success", n)
	}
}

func TestGoneAnswersEndTheEviction(t *testing.T) {
	for name, answer := range map[string]error{
		"404": apierrors.NewNotFound(podsResource, "web-1"),
		"409": apierrors.NewConflict(podsResource, "web-1", errors.New("precondition failed: UID in precondition does not match")),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Options{}, func(*policyv1.Eviction, int) error { return answer })
			pod := testutil.Pod("web-1").Obj()
			if err := h.q.Add(PodRequest(pod, nil, 0)); err != nil {
				t.Fatal(err)
			}
			if o := h.waitFor(t, Gone); o.Err != nil {
				t.Errorf("Gone outcome carries error %v", o.Err)
			}
			time.Sleep(30 * time.Millisecond)
			if n := len(h.calls); n != 1 || h.q.Pending(pod.UID) {
				t.Errorf("%d calls and pending=%t after %s, want 1 call and nothing pending", n, h.q.Pending(pod.UID), name)
			}
		})
	}
}

func TestOtherErrorsAreReportedAndRetried(t *testing.T) {
	h := newHarness(t, Options{}, func(_ *policyv1.Eviction, call int) error {
		if call == 1 {
			return apierrors.NewInternalError(errors.New("etcd is unhappy"))
		}
		return nil
	})
	if err := h.q.Add(PodRequest(testutil.Pod("web-1").Obj(), nil, 0)); err != nil {
		t.Fatal(err)
	}
	o := h.waitFor(t, Failed)
	if !apierrors.IsInternalError(o.Err) {
		t.Errorf("Failed outcome error %v does not keep the API error's type", o.Err)
	}
	h.waitFor(t, Evicted)
}

func TestForgetStopsRetries(t *testing.T) {
	h := newHarness(t, Options{}, func(*policyv1.Eviction, int) error { return pdbRefusal() })
	pod := testutil.Pod("web-1").Obj()
	if err := h.q.Add(PodRequest(pod, nil, 0)); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, PDBBlocked)
	h.q.Forget(pod.UID)
	h.mu.Lock()
	before := len(h.calls)
	h.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	h.mu.Lock()
	after := len(h.calls)
	h.mu.Unlock()
	if after > before+1 { // one attempt may have been in flight
		t.Errorf("%d more eviction calls after Forget", after-before)
	}
}

func TestParallelismIsBoundedPerNode(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight := map[string]int{}
	peak := map[string]int{}
	nodeOf := map[string]string{}
	h := newHarnessWith(t, Options{Workers: 10, PerNode: 2}, func(ev *policyv1.Eviction, _ int) error {
		mu.Lock()
		n := nodeOf[ev.Name]
		inFlight[n]++
		if inFlight[n] > peak[n] {
			peak[n] = inFlight[n]
		}
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight[n]--
		mu.Unlock()
		return nil
	}, true)
	var pods []*corev1.Pod
	for i, n := range []string{"a", "a", "a", "a", "a", "b", "b", "b", "b", "b"} {
		p := testutil.Pod(n + "-" + string(rune('0'+i))).OnNode(n).Obj()
		nodeOf[p.Name] = n
		pods = append(pods, p)
	}
	for _, p := range pods {
		if err := h.q.Add(PodRequest(p, nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	// Both nodes reach their limit (10 workers are free), then the calls are
	// released one by one; the peak per node is checked at the end.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		both := inFlight["a"] == 2 && inFlight["b"] == 2
		snapshot := fmt.Sprint(inFlight)
		mu.Unlock()
		if both {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight %s, want 2 on each node", snapshot)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range pods {
		release <- struct{}{}
	}
	for range pods {
		h.waitFor(t, Evicted)
	}
	if peak["a"] > 2 || peak["b"] > 2 {
		t.Errorf("peak in flight per node %v, want at most 2", peak)
	}
}

func TestRetryNowSkipsTheBackoff(t *testing.T) {
	var allow atomic.Bool
	h := newHarness(t, Options{BaseDelay: time.Hour, MaxDelay: time.Hour}, func(*policyv1.Eviction, int) error {
		if allow.Load() {
			return nil
		}
		return pdbRefusal()
	})
	pod := testutil.Pod("web-1").Obj()
	if err := h.q.Add(PodRequest(pod, nil, 0)); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, PDBBlocked)
	allow.Store(true)
	h.q.RetryNow(pod.UID, "pdb=changed") // without it the next attempt is an hour away
	h.waitFor(t, Evicted)
}

// TestCallsInFlightPerPDB: five pods of one PDB and three without a PDB,
// on different nodes. The API server serializes evictions under one PDB
// (a conflicting one waits 500 ms), so the queue sends at most PerPDB of
// the PDB's at once (DefaultPerPDB unset); the pods without a PDB go in
// parallel, and every pod is evicted.
func TestCallsInFlightPerPDB(t *testing.T) {
	for _, perPDB := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("PerPDB=%d", perPDB), func(t *testing.T) {
			want := perPDB
			if want == 0 {
				want = DefaultPerPDB
			}
			callsInFlightPerPDB(t, perPDB, want)
		})
	}
}

func callsInFlightPerPDB(t *testing.T, perPDB, want int) {
	release := make(chan struct{})
	var mu sync.Mutex
	inFlight, peak := map[string]int{}, map[string]int{}
	groupOf := map[string]string{}
	h := newHarnessWith(t, Options{Workers: 10, PerNode: 10, PerPDB: perPDB, QPS: 1000, Burst: 1000}, func(ev *policyv1.Eviction, _ int) error {
		mu.Lock()
		g := groupOf[ev.Name]
		inFlight[g]++
		peak[g] = max(peak[g], inFlight[g])
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight[g]--
		mu.Unlock()
		return nil
	}, true)
	t.Cleanup(func() { close(release) }) // runs first: frees calls a failed test left waiting
	var reqs []Request
	for i := range 8 {
		p := testutil.Pod(fmt.Sprintf("pod-%d", i)).OnNode(fmt.Sprintf("n%d", i)).Obj()
		r := PodRequest(p, nil, 0)
		groupOf[p.Name] = "none"
		if i < 5 {
			r.PDBs, groupOf[p.Name] = []string{"default/web"}, "web"
		}
		reqs = append(reqs, r)
	}
	for _, r := range reqs {
		if err := h.q.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		ready := inFlight["web"] == want && inFlight["none"] == 3
		snapshot := fmt.Sprint(inFlight)
		mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in flight %s, want %d of the PDB's and the 3 others", snapshot, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range reqs {
		release <- struct{}{}
	}
	for range reqs {
		h.waitFor(t, Evicted)
	}
	if peak["web"] != want || peak["none"] != 3 {
		t.Errorf("peak in flight %v, want web %d and none 3", peak, want)
	}
}

// TestCountedFreesThePDBsSlot: three pods of one PDB, one call at a time
// (DefaultPerPDB). A PDB status that does not count the call in flight
// (no entry for its pod, or the entry it had when it was queued) frees
// nothing; one that counts it lets the next pod's call go while the first
// still waits for its answer, and a call that lands after Counted freed
// its slot does not free a second one.
func TestCountedFreesThePDBsSlot(t *testing.T) {
	release := map[string]chan struct{}{"pod-0": make(chan struct{}), "pod-1": make(chan struct{}), "pod-2": make(chan struct{})}
	var mu sync.Mutex
	var started []string
	inFlight := 0
	h := newHarnessWith(t, Options{Workers: 10, PerNode: 10, QPS: 1000, Burst: 1000}, func(ev *policyv1.Eviction, _ int) error {
		mu.Lock()
		started = append(started, ev.Name)
		inFlight++
		mu.Unlock()
		<-release[ev.Name]
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}, true)
	t.Cleanup(func() { // runs first: frees calls a failed test left waiting
		for _, c := range release {
			close(c)
		}
	})
	old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for i := range 3 {
		p := testutil.Pod(fmt.Sprintf("pod-%d", i)).OnNode(fmt.Sprintf("n%d", i)).Obj()
		r := PodRequest(p, nil, 0)
		r.PDBs, r.Marks = []string{"default/web"}, []metav1.Time{old}
		if err := h.q.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	startedNow := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), started...)
	}
	waitStarted := func(n int) []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got := startedNow(); len(got) >= n || time.Now().After(deadline) {
				return got
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	first := waitStarted(1)
	if len(first) != 1 {
		t.Fatalf("calls started %v, want one", first)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	pdb.Status.DisruptedPods = map[string]metav1.Time{"pod-x": metav1.Now()}
	h.q.Counted("default/web", pdb) // another pod's entry
	pdb.Status.DisruptedPods = map[string]metav1.Time{first[0]: old}
	h.q.Counted("default/web", pdb) // the entry it had when queued
	time.Sleep(100 * time.Millisecond)
	if got := startedNow(); len(got) != 1 {
		t.Fatalf("calls started %v before the PDB's status counted the first", got)
	}

	pdb.Status.DisruptedPods = map[string]metav1.Time{first[0]: metav1.NewTime(old.Add(time.Hour))}
	h.q.Counted("default/web", pdb)
	if got := waitStarted(2); len(got) != 2 {
		t.Fatalf("calls started %v, want the second once the status counts the first", got)
	}
	mu.Lock()
	if inFlight != 2 {
		t.Errorf("%d calls in flight, want 2: the first still waits for its answer", inFlight)
	}
	mu.Unlock()
	release[first[0]] <- struct{}{} // the counted call's answer: the second still holds the slot
	h.waitFor(t, Evicted)
	time.Sleep(100 * time.Millisecond)
	second := startedNow()
	if len(second) != 2 {
		t.Fatalf("calls started %v: an answer freed a slot Counted had freed already", second)
	}
	release[second[1]] <- struct{}{}
	h.waitFor(t, Evicted)
	third := waitStarted(3)
	if len(third) != 3 {
		t.Fatalf("calls started %v, want the third once the second's answer came", third)
	}
	release[third[2]] <- struct{}{}
	h.waitFor(t, Evicted)
}
