package main

import (
	"testing"
	"time"
)

func TestMeasureBudgets(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// PDB web allows 1 from the start; the node is cordoned at 100 ms; pod a
	// is evicted at 150 ms (the budget drops to 0 at 160), it allows 1 again
	// at 400 and pod b is evicted at 700 (0 at 710). Pod c, of PDB other,
	// sits on a node never cordoned: it never waits.
	states := map[string][]pdbState{
		"ns/web": {
			{at: at(0), allowed: 1, healthy: 10, desired: 9, expected: 10},
			{at: at(160), allowed: 0, healthy: 9, desired: 9, expected: 10},
			{at: at(400), allowed: 1, healthy: 10, desired: 9, expected: 10},
			{at: at(710), allowed: 0, healthy: 9, desired: 9, expected: 10},
		},
		"ns/other": {{at: at(0), allowed: 3, healthy: 5, desired: 2, expected: 5}},
	}
	waiters := []waiter{
		{pod: "ns/a", pdbs: []string{"ns/web"}, from: at(100), until: at(150)},
		{pod: "ns/b", pdbs: []string{"ns/web"}, from: at(100), until: at(700)},
		{pod: "ns/c", pdbs: []string{"ns/other"}},
	}
	evictions := []evictionAt{{pod: "ns/a", at: at(150)}, {pod: "ns/b", at: at(700)}}
	use := measureBudgets(states, waiters, evictions, at(0), at(1000))
	// Idle: 100..160 (a, then b waits, budget 1) and 400..700 (b waits).
	if got, want := use.idle["ns/web"], 360*time.Millisecond; got != want {
		t.Errorf("idle budget of web = %v, want %v", got, want)
	}
	if _, ok := use.idle["ns/other"]; ok {
		t.Error("a PDB whose pods never waited got an idle budget")
	}
	// Opportunities start at 100 (cordon) and 400 (budget back): next
	// evictions at 150 and 700.
	if len(use.delays) != 2 || use.delays[0] != 50*time.Millisecond || use.delays[1] != 300*time.Millisecond {
		t.Errorf("delays = %v, want [50ms 300ms]", use.delays)
	}
}

func TestMeasureBudgetsNoBudget(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	states := map[string][]pdbState{"ns/web": {{at: t0, allowed: 0, healthy: 9, desired: 9, expected: 9}}}
	waiters := []waiter{{pod: "ns/a", pdbs: []string{"ns/web"}, from: t0}}
	use := measureBudgets(states, waiters, nil, t0, t0.Add(time.Second))
	if use.idle["ns/web"] != 0 || len(use.delays) != 0 {
		t.Errorf("a budget that never allowed: idle %v, delays %v", use.idle["ns/web"], use.delays)
	}
	if _, ok := use.idle["ns/web"]; !ok {
		t.Error("a PDB with waiting pods must be reported, even at 0 idle")
	}
}

func TestViolations(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	states := map[string][]pdbState{"ns/web": {
		{at: t0, allowed: 0, healthy: 8, desired: 9, expected: 10},                       // before the window
		{at: t0.Add(time.Second), allowed: 0, healthy: 9, desired: 9, expected: 10},      // fine
		{at: t0.Add(2 * time.Second), allowed: 0, healthy: 8, desired: 9, expected: 10},  // violation
		{at: t0.Add(3 * time.Second), allowed: -1, healthy: 9, desired: 9, expected: 10}, // violation
		{at: t0.Add(4 * time.Second), allowed: 0, healthy: 0, desired: 1, expected: 0},   // covers no pods
	}}
	if got := violations(states, t0.Add(time.Millisecond), t0.Add(5*time.Second)); got != 2 {
		t.Errorf("violations = %d, want 2", got)
	}
}
