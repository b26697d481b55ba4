package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/internal/devcluster"
)

// PDBGuard watches the PDBs of a namespace and records every moment one's
// healthy count is below its desired count, once that PDB has been healthy
// (a workload still starting is not a disruption). It checks safety
// invariant 1 throughout a test, not by sampling at the end.
type PDBGuard struct {
	mu         sync.Mutex
	violations []string
	events     int
	stop       func()
}

// WatchPDBs starts a guard; call Check at the end of the test.
func WatchPDBs(t testing.TB, c *devcluster.Cluster, ns string) *PDBGuard {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	g := &PDBGuard{}
	healthy := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pdb, ok := ev.Object.(*policyv1.PodDisruptionBudget)
			if !ok {
				continue
			}
			s := pdb.Status
			g.mu.Lock()
			g.events++
			if s.ObservedGeneration > 0 && s.ExpectedPods > 0 && s.CurrentHealthy >= s.DesiredHealthy {
				healthy[pdb.Name] = true
			}
			if healthy[pdb.Name] && s.CurrentHealthy < s.DesiredHealthy {
				g.violations = append(g.violations, fmt.Sprintf("PDB %s/%s: %d healthy < %d desired at %s",
					ns, pdb.Name, s.CurrentHealthy, s.DesiredHealthy, time.Now().Format(time.StampMilli)))
			}
			g.mu.Unlock()
		}
	}()
	var once sync.Once
	g.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(g.stop)
	return g
}

// Check stops the guard and fails the test for every violation it saw, or
// if it saw no event at all (then it proved nothing).
func (g *PDBGuard) Check(t testing.TB) {
	t.Helper()
	g.stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.events == 0 {
		t.Error("the PDB watch saw no event; it proves nothing")
	}
	for _, v := range g.violations {
		t.Error(v)
	}
}
