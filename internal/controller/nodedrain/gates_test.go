package nodedrain

import (
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// TestGatesKeepOnlyWhatIsOutOfService: a gate's queued eviction that is
// refused sends the pod back in service (refused), an evicted pod's gate
// goes (done), and a drain that stops forgets its node's gates and dry-run
// times; an entry with nothing left in it is dropped.
func TestGatesKeepOnlyWhatIsOutOfService(t *testing.T) {
	var g gates
	web1 := testutil.Pod("web-1").Namespace("shop").OnNode("n1").Obj()
	web2 := testutil.Pod("web-2").Namespace("shop").OnNode("n1").Obj()
	g.updateGate(web1, func(e *gate) { e.since = time.Now() })
	if g.refused(eviction.Outcome{UID: web1.UID, Result: eviction.PDBBlocked}) {
		t.Error("a gate whose eviction was not queued was sent back in service")
	}
	g.updateGate(web1, func(e *gate) { e.queued = true })
	if !g.refused(eviction.Outcome{UID: web1.UID, Result: eviction.PDBBlocked, Message: "budget"}) {
		t.Error("a refused queued eviction of a pod out of service was not noticed")
	}
	if e := g.get(web1.UID); e.gate.queued || e.gate.refused != "PDBBlocked: budget" {
		t.Errorf("gate after the refusal: %+v", e.gate)
	}
	if !g.done(web1.UID) || g.get(web1.UID).gated || len(g.byPod) != 0 {
		t.Errorf("an evicted pod's gate is kept: %d entries", len(g.byPod))
	}
	g.updateGate(web2, func(e *gate) { e.since = time.Now() })
	g.triedAt(web1, time.Now())
	if n := g.count("n1"); n != 2 {
		t.Fatalf("%d entries of n1, want 2", n)
	}
	g.forgetNode("n1")
	if n := g.count("n1"); n != 0 {
		t.Errorf("%d entries outlived their node's drain", n)
	}
}
