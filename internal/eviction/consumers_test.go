package eviction

import (
	"context"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestEachConsumerChecksAndHearsItsOwnEvictions: the drains and the
// EvictionRequest coordinator share one queue. A request For the
// coordinator is checked by the coordinator's MayEvict and answered to its
// OnOutcome, never the drains' (whose MayEvict reads the node's NodeDrain,
// which the coordinator's pods may not have), and the other way round; a
// drain's ForgetNode leaves the coordinator's eviction on that node queued.
func TestEachConsumerChecksAndHearsItsOwnEvictions(t *testing.T) {
	var mu sync.Mutex
	asked := map[string][]string{} // consumer: pods its MayEvict was asked about
	heard := map[string][]string{} // consumer: pods whose outcome it heard
	outcomes := make(chan Outcome, 10)
	release := make(chan struct{})
	q := NewQueueWithEvictor(func(_ context.Context, ev *policyv1.Eviction) error {
		if ev.Name == "er-held-back" {
			<-release
		}
		return nil
	}, Options{})
	for _, consumer := range []string{ForDrains, "evictionrequest"} {
		q.Handle(consumer, func(o Outcome) {
			mu.Lock()
			heard[consumer] = append(heard[consumer], o.Pod.Name)
			mu.Unlock()
			outcomes <- o
		}, func(r Request) (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			asked[consumer] = append(asked[consumer], r.Pod.Name)
			return true, ""
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	drains := PodRequest(testutil.Pod("drain-pod").OnNode("n1").Obj(), nil, 0)
	coordinated := PodRequest(testutil.Pod("er-pod").OnNode("n1").Obj(), nil, 0)
	coordinated.For = "evictionrequest"
	for _, r := range []Request{drains, coordinated} {
		if err := q.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]Outcome{}
	for range 2 {
		select {
		case o := <-outcomes:
			got[o.Pod.Name] = o
		case <-time.After(10 * time.Second):
			t.Fatalf("outcomes so far: %v", got)
		}
	}
	if got["er-pod"].For != "evictionrequest" || got["drain-pod"].For != ForDrains {
		t.Errorf("outcomes %+v: each should name who asked", got)
	}
	mu.Lock()
	if len(asked[ForDrains]) != 1 || asked[ForDrains][0] != "drain-pod" || len(asked["evictionrequest"]) != 1 || asked["evictionrequest"][0] != "er-pod" {
		t.Errorf("MayEvict asked %v; want each consumer asked about its own pod only", asked)
	}
	if len(heard[ForDrains]) != 1 || heard[ForDrains][0] != "drain-pod" || len(heard["evictionrequest"]) != 1 || heard["evictionrequest"][0] != "er-pod" {
		t.Errorf("outcomes heard %v; want each consumer to hear its own pod only", heard)
	}
	mu.Unlock()

	// A drain of n1 ends: it forgets its own, not the coordinator's.
	later := PodRequest(testutil.Pod("er-held-back").OnNode("n1").Obj(), nil, 0)
	later.For = "evictionrequest"
	queued := PodRequest(testutil.Pod("er-queued").OnNode("n1").Obj(), nil, 1)
	queued.For = "evictionrequest"
	drainsToo := PodRequest(testutil.Pod("drain-queued").OnNode("n1").Obj(), nil, 1)
	later.PerNode = 1 // in flight, it keeps n1's one slot: the others wait in the queue
	if err := q.Add(later); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(asked["evictionrequest"])
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held-back eviction was never asked for")
		}
		time.Sleep(time.Millisecond)
	}
	for _, r := range []Request{queued, drainsToo} {
		if err := q.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if dropped := q.ForgetNode("n1"); dropped != 1 {
		t.Errorf("ForgetNode dropped %d queued evictions, want the drains' one", dropped)
	}
	if !q.Pending(queued.UID) || !q.Pending(later.UID) || q.Pending(drainsToo.UID) {
		t.Errorf("pending after ForgetNode: coordinator's %v and %v, drains' %v; want the coordinator's only",
			q.Pending(queued.UID), q.Pending(later.UID), q.Pending(drainsToo.UID))
	}
	close(release)
}

// TestConsumersNeverTakeOverEachOthersEvictions (from a review): the
// coordinator asking for a pod the drains reserved (taken out of service,
// counted against its PDB) or queued leaves that request as it is, so the
// PDB's budget still counts it; a drain's Forget leaves the coordinator's
// eviction queued; and a request for a consumer nobody registered is held,
// never evicted unchecked.
func TestConsumersNeverTakeOverEachOthersEvictions(t *testing.T) {
	q := NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, Options{})
	pdb := testutil.PDB("default", "web", "web", 1, 1)
	pdbs := map[string]*policyv1.PodDisruptionBudget{"default/web": pdb}
	running := func(types.UID, types.NamespacedName) bool { return true }

	reserved := PodRequest(testutil.Pod("web-1").OnNode("n1").Obj(), nil, 0)
	reserved.PDBs = []string{"default/web"}
	q.Reserve(reserved)
	if got := q.Budget(pdbs, running)["default/web"]; got != 0 {
		t.Fatalf("budget with the reservation: %d, want 0", got)
	}
	theirs := reserved
	theirs.For = "evictionrequest"
	if err := q.Add(theirs); err != nil {
		t.Fatal(err)
	}
	if got := q.Budget(pdbs, running)["default/web"]; got != 0 || q.Pending(reserved.UID) || !q.State(reserved.UID).Reserved {
		t.Errorf("after the coordinator's Add: budget %d, pending %v, reserved %v; want the drains' reservation kept, nothing queued",
			got, q.Pending(reserved.UID), q.State(reserved.UID).Reserved)
	}

	coordinated := PodRequest(testutil.Pod("web-2").OnNode("n1").Obj(), nil, 0)
	coordinated.For = "evictionrequest"
	if err := q.Add(coordinated); err != nil {
		t.Fatal(err)
	}
	drains := coordinated
	drains.For = ForDrains
	if err := q.Add(drains); err != nil {
		t.Fatal(err)
	}
	q.Forget(coordinated.UID)
	if !q.Pending(coordinated.UID) || q.requests[coordinated.UID].For != "evictionrequest" {
		t.Errorf("the drains' Add or Forget took over the coordinator's eviction: %+v", q.requests[coordinated.UID])
	}

	if ok, why := q.handlersOf("nobody").mayEvict(coordinated); ok || why == "" {
		t.Errorf("a consumer nobody registered: may evict %v (%q), want held", ok, why)
	}
}

// TestARequestedPodsReservationEndsWithThePod (from a review): a drain
// reserves the budget of a pod it asked for with an EvictionRequest. The
// reservation counts while the pod runs, whoever evicts it (another
// coordinator, a responder deleting it), and is dropped once the pod stops
// running, so the PDB's next pod may be asked for. The coordinator's Add
// takes it over; a pod this queue evicted is not reserved again by a pass
// that read the cache before.
func TestARequestedPodsReservationEndsWithThePod(t *testing.T) {
	q := NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, Options{})
	pdbs := map[string]*policyv1.PodDisruptionBudget{"default/web": testutil.PDB("default", "web", "web", 1, 1)}
	asked := PodRequest(testutil.Pod("web-1").OnNode("n1").Obj(), nil, 0)
	asked.PDBs, asked.For = []string{"default/web"}, ForEvictionRequests
	q.Reserve(asked)
	runs := true
	running := func(uid types.UID, _ types.NamespacedName) bool { return uid != asked.UID || runs }
	if got := q.Budget(pdbs, running)["default/web"]; got != 0 {
		t.Fatalf("budget while the asked pod runs: %d, want 0", got)
	}
	runs = false // another coordinator evicted it; it is terminating
	if got := q.Budget(pdbs, running)["default/web"]; got != 1 || q.State(asked.UID).Reserved {
		t.Errorf("budget once the pod stopped running: %d (reserved %v), want 1 and the reservation gone", got, q.State(asked.UID).Reserved)
	}

	other := PodRequest(testutil.Pod("web-2").OnNode("n1").Obj(), nil, 0)
	other.PDBs, other.For = []string{"default/web"}, ForEvictionRequests
	q.Reserve(other)
	if err := q.Add(other); err != nil { // the coordinator's evictor
		t.Fatal(err)
	}
	if st := q.State(other.UID); !st.Pending || st.Reserved {
		t.Errorf("after the coordinator's Add: %+v, want its eviction queued in place of the reservation", st)
	}
	q.mu.Lock()
	q.evicted[other.UID] = evictedPod{req: other, at: time.Now(), node: "n1"}
	delete(q.requests, other.UID)
	q.mu.Unlock()
	q.Reserve(other)
	if q.State(other.UID).Reserved {
		t.Error("a pod already evicted was reserved again")
	}
}

// TestBudgetBesideLeavesOutThePodsOwnClaim: the coordinator asks what a
// pod's PDB lets through beside the rest. A drain's reservation of another
// pod takes the budget; the pod's own reservation (the drain asked for it
// with an EvictionRequest) does not count against its own eviction.
func TestBudgetBesideLeavesOutThePodsOwnClaim(t *testing.T) {
	q := NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, Options{})
	pdbs := map[string]*policyv1.PodDisruptionBudget{"default/web": testutil.PDB("default", "web", "web", 1, 1)}
	running := func(types.UID, types.NamespacedName) bool { return true }
	mine := PodRequest(testutil.Pod("web-1").OnNode("n1").Obj(), nil, 0)
	mine.PDBs, mine.For = []string{"default/web"}, ForEvictionRequests
	if got := q.BudgetBeside(mine.UID, pdbs, running)["default/web"]; got != 1 {
		t.Fatalf("budget beside nothing: %d, want the PDB's 1", got)
	}
	q.Reserve(mine)
	if got, all := q.BudgetBeside(mine.UID, pdbs, running)["default/web"], q.Budget(pdbs, running)["default/web"]; got != 1 || all != 0 {
		t.Errorf("with the pod's own reservation: beside it %d, in all %d; want 1 and 0", got, all)
	}
	drains := PodRequest(testutil.Pod("web-2").OnNode("n2").Obj(), nil, 0)
	drains.PDBs = []string{"default/web"}
	q.Reserve(drains) // a drain took web-2 out of service
	if got := q.BudgetBeside(mine.UID, pdbs, running)["default/web"]; got != 0 {
		t.Errorf("with a drain's reservation of another pod: %d, want 0 (the coordinator must wait)", got)
	}
	q.Unreserve(drains.UID)
	if got := q.BudgetBeside(mine.UID, pdbs, running)["default/web"]; got != 1 {
		t.Errorf("once the drain's reservation is gone: %d, want 1", got)
	}
}
