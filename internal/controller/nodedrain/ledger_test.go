package nodedrain

import (
	"context"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestLedgerAnswersUnderwayAndWaiting: what the ledger and the queue know
// of a pod with a PDB says whether its eviction counts against the budget
// and whether it waits on it. Pure: the queue is not run.
func TestLedgerAnswersUnderwayAndWaiting(t *testing.T) {
	running := func(types.UID, types.NamespacedName) bool { return true }
	for _, tc := range []struct {
		name              string
		queued, refused   bool
		retrying, gated   bool
		underway, waiting bool
	}{
		{name: "not queued", waiting: true},
		{name: "queued", queued: true, underway: true},
		{name: "refused for its PDB", queued: true, refused: true, waiting: true},
		{name: "refused, tried again at once", queued: true, refused: true, retrying: true, underway: true},
		{name: "out of service, not queued yet", gated: true, underway: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l ledger
			q := eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{})
			pod := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
			pdbs := []string{"shop/web"}
			l.claim(pod, pdbs, nil)
			if tc.queued {
				if err := q.Add(eviction.PodRequest(pod, nil, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.refused {
				l.record(eviction.Outcome{UID: pod.UID, Node: "n1", Result: eviction.PDBBlocked})
			}
			if tc.retrying {
				l.retrying(pod.UID, "shop/web=1/1/1")
			}
			if tc.gated {
				l.updateGate(pod, func(g *gate) { g.since = time.Now() })
			}
			if got := l.waitsOnBudget(drain.Decision{Pod: pod, PDBs: pdbs}, q); got != tc.waiting {
				t.Errorf("waitsOnBudget = %v, want %v", got, tc.waiting)
			}
			left := map[string]int{"shop/web": 1}
			l.underway(left, nil, q, running)
			if got := left["shop/web"] == 0; got != tc.underway {
				t.Errorf("underway = %v, want %v (budget left %d of 1)", got, tc.underway, left["shop/web"])
			}
			if claimed := len(l.pdbsOf(pod.UID)) > 0; claimed != tc.underway {
				t.Errorf("claim kept = %v, want it kept only while underway", claimed)
			}
		})
	}
}

// TestLedgerDropsEmptyEntries: a drain that stops drops the refusal, gate
// and dry-run time of its pods but not their claims; a claim no longer
// underway is dropped by the next budget that looks at it, and with it the
// pod's entry.
func TestLedgerDropsEmptyEntries(t *testing.T) {
	var l ledger
	q := eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{})
	pod := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
	l.claim(pod, []string{"shop/web"}, nil)
	l.record(eviction.Outcome{UID: pod.UID, Node: "n1", Result: eviction.PDBBlocked})
	l.updateGate(pod, func(g *gate) { g.queued = true })
	l.triedAt(pod, time.Now())

	l.forgetNode("n1")
	if l.get(pod.UID).refused {
		t.Error("the refusal outlived its node's drain")
	}
	if l.get(pod.UID).gated {
		t.Error("the gate outlived its node's drain")
	}
	if !l.get(pod.UID).tried.IsZero() {
		t.Error("the dry-run time outlived its node's drain")
	}
	if len(l.pdbsOf(pod.UID)) == 0 {
		t.Fatal("the claim was dropped with the drain; it stays until the eviction is no longer underway")
	}

	l.underway(map[string]int{"shop/web": 1}, nil, q, func(types.UID, types.NamespacedName) bool { return true })
	if len(l.pods) != 0 || len(l.byPDB) != 0 {
		t.Errorf("the ledger keeps %d entries and %d PDBs once nothing is underway, want none", len(l.pods), len(l.byPDB))
	}
}

// TestBudgetLeavesOutEvictionsThePDBCounts: a claimed pod whose eviction
// the PDB's status already counts (an entry in disruptedPods newer than the
// one it had when the pod was claimed) takes nothing more from the budget;
// one the status does not count yet (no entry, or the entry it had at the
// claim, from an earlier eviction of a pod of that name) does. Pure.
func TestBudgetLeavesOutEvictionsThePDBCounts(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	later := metav1.NewTime(earlier.Add(90 * time.Second))
	running := func(types.UID, types.NamespacedName) bool { return true }
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
			var l ledger
			q := eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{})
			pod := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
			pdb := testutil.PDB("shop", "web", "web", 1, 2)
			pdb.Status.DisruptedPods = tc.atClaim
			l.claim(pod, []string{"shop/web"}, drain.GuardsOf(pdb))
			if err := q.Add(eviction.PodRequest(pod, nil, 0)); err != nil {
				t.Fatal(err)
			}
			now := pdb.DeepCopy()
			now.Status.DisruptedPods = tc.now
			left := map[string]int{"shop/web": 2}
			l.underway(left, map[string]*policyv1.PodDisruptionBudget{"shop/web": now}, q, running)
			if left["shop/web"] != tc.left {
				t.Errorf("budget left %d of 2, want %d", left["shop/web"], tc.left)
			}
			if got := l.countedByAll(pod.UID, drain.GuardsOf(now)); got != tc.counted {
				t.Errorf("countedByAll = %v, want %v", got, tc.counted)
			}
		})
	}
}
