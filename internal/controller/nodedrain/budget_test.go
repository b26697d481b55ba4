package nodedrain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestBudgetIsSharedByDrains: two drains, each with two pods of one
// Deployment whose PDB allows one disruption. Their passes together queue
// one eviction, not one each: the second drain's budget counts the first
// drain's eviction on its way. (The queue is not run: what counts is what
// the passes hand to it.)
func TestBudgetIsSharedByDrains(t *testing.T) {
	r := &Reconciler{}
	r.Evictions = eviction.NewQueueWithEvictor(func(context.Context, *policyv1.Eviction) error { return nil }, eviction.Options{})
	r.guards.Set(testutil.PDB("shop", "web", "web", 1, 1))
	now := time.Now()
	queued := 0
	for _, node := range []string{"n1", "n2"} {
		pods := []*corev1.Pod{
			testutil.Pod(node+"-web-1").Namespace("shop").OnNode(node).OwnedBy("ReplicaSet", "web").Labels("app", "web").Obj(),
			testutil.Pod(node+"-web-2").Namespace("shop").OnNode(node).OwnedBy("ReplicaSet", "web").Labels("app", "web").Obj(),
		}
		plan := drain.New(pods, &r.guards, drain.Rules{}, now)
		s := &scope{drain: testutil.NodeDrain(node, "", "cli:test"), now: now, plan: &plan}
		for _, stage := range []stage{r.nextSteps, r.evict} {
			if _, err := stage(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range pods {
			if r.Evictions.Pending(p.UID) {
				queued++
			}
		}
	}
	if queued != 1 {
		t.Errorf("the two drains queued %d evictions of pods behind a PDB that allows 1", queued)
	}
}
