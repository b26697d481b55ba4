package testenv

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pdbAt(generation int64, healthy, desired int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: generation},
		Status: policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: generation, ExpectedPods: 16, CurrentHealthy: healthy, DesiredHealthy: desired,
		},
	}
}

// The guard judges a dip against the budget last met: a budget tightened
// below what is healthy at that moment is not a dip; a dip under the same
// spec is, and so is one below the earlier budget before the tightened one
// was met.
func TestPDBGuardJudgesADipUnderTheSpecInForce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		states []*policyv1.PodDisruptionBudget
		dips   int
	}{
		{"a workload still starting", []*policyv1.PodDisruptionBudget{pdbAt(1, 10, 15), pdbAt(1, 16, 15)}, 0},
		{"evictions within the budget", []*policyv1.PodDisruptionBudget{pdbAt(1, 16, 15), pdbAt(1, 15, 15), pdbAt(1, 16, 15)}, 0},
		{"a dip", []*policyv1.PodDisruptionBudget{pdbAt(1, 16, 15), pdbAt(1, 14, 15)}, 1},
		{"a budget tightened while one pod is away", []*policyv1.PodDisruptionBudget{pdbAt(1, 15, 15), pdbAt(2, 15, 16), pdbAt(2, 16, 16), pdbAt(3, 16, 15)}, 0},
		{"a dip under the tightened budget once it was met", []*policyv1.PodDisruptionBudget{pdbAt(1, 15, 15), pdbAt(2, 15, 16), pdbAt(2, 16, 16), pdbAt(2, 15, 16)}, 1},
		{"a dip under the first budget after a tightened one", []*policyv1.PodDisruptionBudget{pdbAt(1, 16, 15), pdbAt(2, 15, 16), pdbAt(2, 14, 16)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &PDBGuard{}
			for _, s := range tc.states {
				g.observe("ns", s)
			}
			if len(g.violations) != tc.dips {
				t.Errorf("%d dips recorded, want %d: %v", len(g.violations), tc.dips, g.violations)
			}
		})
	}
}
