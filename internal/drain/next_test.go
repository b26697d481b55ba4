package drain

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestNextTakesThePodsStepsInOrder: a pod the planner evicts is held first,
// then surged, then taken out of service, then evicted; one that leaves
// through an EvictionRequest is asked for once surged; the planner's other
// actions are steps of their own.
func TestNextTakesThePodsStepsInOrder(t *testing.T) {
	evict := Decision{Action: Evict}
	cases := []struct {
		name string
		d    Decision
		f    PodFacts
		want Step
	}{
		{"skipped", Decision{Action: Skip}, PodFacts{Held: true, Surge: true}, StepStay},
		{"terminating", Decision{Action: Wait}, PodFacts{}, StepWait},
		{"unmanaged", Decision{Action: Block}, PodFacts{Gated: true}, StepBlocked},
		{"plain", evict, PodFacts{}, StepEvict},
		{"held, and surged and gated too", evict, PodFacts{Held: true, Surge: true, Gated: true}, StepHeld},
		{"surged, its replacement not serving", evict, PodFacts{Surge: true, Gated: true}, StepSurge},
		{"surged, its replacement serves, gated", evict, PodFacts{Surge: true, SurgeServing: true, Gated: true}, StepOutOfService},
		{"surged, its replacement serves", evict, PodFacts{Surge: true, SurgeServing: true}, StepEvict},
		{"gated", evict, PodFacts{Gated: true}, StepOutOfService},
		{"gated, taking it out would stick", evict, PodFacts{Gated: true, GateWouldStick: true}, StepEvict},
		{"gated, already out of service though it would stick", evict, PodFacts{Gated: true, OutOfService: true, GateWouldStick: true}, StepOutOfService},
		{"out of service without the gate", evict, PodFacts{OutOfService: true}, StepEvict},
		{"requested", evict, PodFacts{Requested: true}, StepRequest},
		{"requested, held", evict, PodFacts{Requested: true, Held: true}, StepHeld},
		{"requested, surged, its replacement not serving", evict, PodFacts{Requested: true, Surge: true}, StepSurge},
		{"requested, surged, its replacement serves", evict, PodFacts{Requested: true, Surge: true, SurgeServing: true}, StepRequest},
		{"requested and gated: its responders, then its coordinator, have the rest", evict, PodFacts{Requested: true, Gated: true}, StepRequest},
		{"requested, unmanaged", Decision{Action: Block}, PodFacts{Requested: true}, StepBlocked},
	}
	for _, c := range cases {
		if got := Next(c.d, c.f); got != c.want {
			t.Errorf("%s: Next = %s, want %s", c.name, got, c.want)
		}
	}
}

// TestGateWouldStick: only a PDB that needs no healthy pod, whose only
// healthy pod this is, under the default unhealthyPodEvictionPolicy.
func TestGateWouldStick(t *testing.T) {
	pdb := func(desired, current int32, always bool) *policyv1.PodDisruptionBudget {
		p := &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &intstr.IntOrString{IntVal: 1}},
			Status: policyv1.PodDisruptionBudgetStatus{DesiredHealthy: desired, CurrentHealthy: current}}
		if always {
			policy := policyv1.AlwaysAllow
			p.Spec.UnhealthyPodEvictionPolicy = &policy
		}
		return p
	}
	cases := []struct {
		name string
		pdb  *policyv1.PodDisruptionBudget
		want bool
	}{
		{"maxUnavailable 1 over one replica", pdb(0, 1, false), true},
		{"the same, AlwaysAllow", pdb(0, 1, true), false},
		{"needs healthy pods", pdb(2, 3, false), false},
		{"two healthy, none needed", pdb(0, 2, false), false},
	}
	for _, c := range cases {
		d := Decision{Action: Evict, PDBs: []string{"ns/p"}}
		if got := GateWouldStick(d, map[string]*policyv1.PodDisruptionBudget{"ns/p": c.pdb}); got != c.want {
			t.Errorf("%s: GateWouldStick = %v, want %v", c.name, got, c.want)
		}
	}
	if GateWouldStick(Decision{Action: Evict}, nil) {
		t.Error("a pod no PDB guards: its eviction cannot stick")
	}
}
