package eviction

import (
	"context"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// idleQueue is a queue that is not run: what counts is what it keeps.
func idleQueue() *Queue {
	return NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, Options{})
}

func alwaysRunning(types.UID, types.NamespacedName) bool { return true }

// refuse records a refusal of the pod's eviction as the queue's worker
// does after an answer.
func refuse(q *Queue, uid types.UID, r Result) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.recordLocked(Outcome{UID: uid, Node: "n1", Result: r, At: time.Now()})
}

// TestQueueAnswersUnderwayAndWaiting: what the queue knows of a pod with a
// PDB says whether its eviction counts against the budget and whether it
// waits on it.
func TestQueueAnswersUnderwayAndWaiting(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		queued, refused, retrying bool
		reserved                  bool
		underway, waiting         bool
	}{
		{name: "not queued", waiting: true},
		{name: "queued", queued: true, underway: true},
		{name: "refused for its PDB", queued: true, refused: true, waiting: true},
		{name: "refused, tried again at once", queued: true, refused: true, retrying: true, underway: true},
		{name: "out of service, not queued yet", reserved: true, underway: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := idleQueue()
			pod := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
			req := PodRequest(pod, nil, 0)
			req.PDBs = []string{"shop/web"}
			if tc.reserved {
				q.Reserve(req)
			}
			if tc.queued {
				if err := q.Add(req); err != nil {
					t.Fatal(err)
				}
			}
			if tc.refused {
				refuse(q, pod.UID, PDBBlocked)
			}
			if tc.retrying {
				q.RetryNow(pod.UID, "shop/web=1/1/1")
			}
			if got := q.State(pod.UID).WaitsOnBudget(); got != tc.waiting {
				t.Errorf("WaitsOnBudget = %v, want %v", got, tc.waiting)
			}
			left := q.Budget(map[string]*policyv1.PodDisruptionBudget{"shop/web": testutil.PDB("shop", "web", "web", 1, 1)}, alwaysRunning)
			if got := left["shop/web"] == 0; got != tc.underway {
				t.Errorf("underway = %v, want %v (budget left %d of 1)", got, tc.underway, left["shop/web"])
			}
			if _, claimed := q.Claim(pod.UID); claimed != tc.underway {
				t.Errorf("claim kept = %v, want it kept only while underway", claimed)
			}
		})
	}
}

// TestForgetNodeDropsWhatTheQueueKeeps: a drain that stops drops its pods'
// queued evictions, reservations, refusals and claims; Forget alone keeps
// the pod's refusal (it still explains the pod).
func TestForgetNodeDropsWhatTheQueueKeeps(t *testing.T) {
	q := idleQueue()
	web1 := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
	web2 := testutil.Pod("web-2").Namespace("shop").OnNode("n1").Obj()
	r1, r2 := PodRequest(web1, nil, 0), PodRequest(web2, nil, 0)
	r1.PDBs, r2.PDBs = []string{"shop/web"}, []string{"shop/web"}
	if err := q.Add(r1); err != nil {
		t.Fatal(err)
	}
	refuse(q, web1.UID, PDBBlocked)
	q.Reserve(r2)

	q.Forget(web1.UID)
	if !q.State(web1.UID).Refused {
		t.Error("Forget dropped the pod's refusal")
	}
	q.ForgetNode("n1")
	for _, uid := range []types.UID{web1.UID, web2.UID} {
		if st := q.State(uid); st != (PodState{}) {
			t.Errorf("after ForgetNode the queue still knows %+v", st)
		}
	}
	if n := q.Remembered("n1"); n != 0 || len(q.byPDB) != 0 {
		t.Errorf("after ForgetNode the queue keeps %d things of the node and %d PDBs' claims", n, len(q.byPDB))
	}
}

// TestBudgetLeavesOutEvictionsThePDBCounts: a pod whose eviction the PDB's
// status already counts (an entry in disruptedPods newer than the one it
// had when the eviction was asked) takes nothing more from the budget; one
// the status does not count yet (no entry, or the entry it had when asked,
// from an earlier eviction of a pod of that name) does.
func TestBudgetLeavesOutEvictionsThePDBCounts(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	later := metav1.NewTime(earlier.Add(90 * time.Second))
	for _, tc := range []struct {
		name         string
		atClaim, now map[string]metav1.Time // the PDB's disruptedPods
		left         int
		counted      bool
	}{
		{name: "the status does not list the pod", left: 1},
		{name: "the status lists the pod since the claim", now: map[string]metav1.Time{"web-1": later}, left: 2, counted: true},
		{name: "the status lists an earlier eviction of that name", atClaim: map[string]metav1.Time{"web-1": earlier}, now: map[string]metav1.Time{"web-1": earlier}, left: 1},
		{name: "the status lists the pod again", atClaim: map[string]metav1.Time{"web-1": earlier}, now: map[string]metav1.Time{"web-1": later}, left: 2, counted: true},
		{name: "the status lists another pod", now: map[string]metav1.Time{"web-2": later}, left: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := idleQueue()
			pod := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
			pdb := testutil.PDB("shop", "web", "web", 2, 2)
			pdb.Status.DisruptedPods = tc.atClaim
			req := PodRequest(pod, nil, 0)
			req.PDBs = []string{"shop/web"}
			req.Marks = MarksOf(pod.Name, req.PDBs, map[string]*policyv1.PodDisruptionBudget{"shop/web": pdb})
			if err := q.Add(req); err != nil {
				t.Fatal(err)
			}
			now := pdb.DeepCopy()
			now.Status.DisruptedPods = tc.now
			left := q.Budget(map[string]*policyv1.PodDisruptionBudget{"shop/web": now}, alwaysRunning)
			if left["shop/web"] != tc.left {
				t.Errorf("budget left %d of 2, want %d", left["shop/web"], tc.left)
			}
			claim, _ := q.Claim(pod.UID)
			if got := CountedBy(now, pod.Name, markOf(claim, 0)); got != tc.counted {
				t.Errorf("CountedBy = %v, want %v", got, tc.counted)
			}
		})
	}
}

// TestEvictedPodCountsUntilItIsSeenLeaving: an evicted pod counts against
// its PDB while the caller's cache shows it running; once it does not, its
// claim is dropped, though the queue still refuses to evict it again.
func TestEvictedPodCountsUntilItIsSeenLeaving(t *testing.T) {
	h := newHarness(t, Options{}, func(*policyv1.Eviction, int) error { return nil })
	pod := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
	req := PodRequest(pod, nil, 0)
	req.PDBs = []string{"shop/web"}
	if err := h.q.Add(req); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, Evicted)
	pdbs := map[string]*policyv1.PodDisruptionBudget{"shop/web": testutil.PDB("shop", "web", "web", 1, 1)}
	if left := h.q.Budget(pdbs, alwaysRunning); left["shop/web"] != 0 {
		t.Errorf("an evicted pod still running left %d of 1", left["shop/web"])
	}
	leaving := func(types.UID, types.NamespacedName) bool { return false }
	if left := h.q.Budget(pdbs, leaving); left["shop/web"] != 1 {
		t.Errorf("an evicted pod seen leaving left %d of 1, want it to count no more", left["shop/web"])
	}
	if _, claimed := h.q.Claim(pod.UID); claimed {
		t.Error("the claim of a pod seen leaving was kept")
	}
	if !h.q.State(pod.UID).Evicted {
		t.Error("the queue forgot that it evicted the pod")
	}
}
