package main

import (
	"testing"
	"time"
)

// TestIdleSplit: PDB web allows 1 from the start; pod a waits from 100 ms
// and its eviction call is in flight from 120 to 150 ms (accepted then);
// pod b waits from 100 to 700 ms, its call in flight from 500 to 700; the
// budget is 0 from 160 to 400 ms. Idle with a call in flight: 120..150
// and 500..700; with none: 100..120, 150..160 and 400..500. A call of a
// pod of another PDB does not count.
func TestIdleSplit(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	states := []pdbState{
		{at: at(0), allowed: 1},
		{at: at(160), allowed: 0},
		{at: at(400), allowed: 1},
	}
	ws := []waiter{
		{pod: "ns/a", pdbs: []string{"ns/web"}, from: at(100), until: at(150)},
		{pod: "ns/b", pdbs: []string{"ns/web"}, from: at(100), until: at(700)},
	}
	calls := []call{
		{pod: "ns/a", from: at(120), to: at(150), code: 201},
		{pod: "ns/other", from: at(400), to: at(450), code: 201},
		{pod: "ns/b", from: at(500), to: at(700), code: 201},
	}
	inFlight, none := idleSplit(states, ws, calls, at(0), at(1000))
	if want := 230 * time.Millisecond; inFlight != want {
		t.Errorf("idle with a call in flight %v, want %v", inFlight, want)
	}
	if want := 130 * time.Millisecond; none != want {
		t.Errorf("idle with none %v, want %v", none, want)
	}
}

func TestTimelineCallsKeepsTheDrainersEvictionsAndTheServersPDBUpdates(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)
	reqs := []request{
		{user: "vacate:controller", verb: "create", resource: "pods", subresource: "eviction", namespace: "ns", name: "a", code: 201, received: t0, done: t0.Add(time.Second)},
		{user: "bench:tight", verb: "create", resource: "pods", subresource: "eviction", namespace: "ns", name: "b", code: 429, received: t0, done: t0},
		{user: apiServerUser, verb: "update", resource: "poddisruptionbudgets", subresource: "status", namespace: "ns", name: "web", code: 409, received: t0, done: t0},
		{user: "system:kube-controller-manager", verb: "update", resource: "poddisruptionbudgets", subresource: "status", namespace: "ns", name: "web", code: 200, received: t0, done: t0},
		{user: "vacate:controller", verb: "create", resource: "pods", subresource: "eviction", namespace: "ns", name: "late", code: 201, received: t0.Add(time.Hour), done: t0.Add(time.Hour)},
	}
	ev, up := timelineCalls(reqs, "vacate:controller", t0, t0.Add(time.Minute))
	if len(ev) != 1 || ev[0].pod != "ns/a" || ev[0].code != 201 {
		t.Errorf("evictions %+v, want the controller's of ns/a only", ev)
	}
	if len(up) != 1 || up[0].pod != "ns/web" || up[0].code != 409 {
		t.Errorf("PDB updates %+v, want the API server's conflict on ns/web only", up)
	}
}
