package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// PDBGuard watches the PDBs of a namespace and records every moment one's
// healthy count is below its desired count, once that PDB has been healthy
// (a workload still starting is not a disruption). A budget a person
// tightened below what is healthy at that moment is judged by the budget
// last met until it is met in turn: the pods already gone went under the
// budget then in force. It checks safety invariant 1 throughout a test, not
// by sampling at the end.
type PDBGuard struct {
	mu         sync.Mutex
	violations []string
	events     int
	met        map[string]metBudget // each PDB's budget last seen met
	stop       func()
}

// metBudget is a PDB's spec generation and desired healthy count when it was
// last seen met.
type metBudget struct {
	generation int64
	desired    int32
}

// WatchPDBs starts a guard; call Check at the end of the test.
func WatchPDBs(t testing.TB, c *devcluster.Cluster, ns string) *PDBGuard {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pdbs := c.Client.PolicyV1().PodDisruptionBudgets(ns)
	list, err := pdbs.List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// A retry watcher resumes from the last event seen when the connection
	// breaks, so the guard keeps watching across an API server restart.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return pdbs.Watch(ctx, opts)
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	g := &PDBGuard{}
	for i := range list.Items {
		g.observe(ns, &list.Items[i])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pdb, ok := ev.Object.(*policyv1.PodDisruptionBudget); ok {
				g.observe(ns, pdb)
			}
		}
	}()
	var once sync.Once
	g.stop = func() { once.Do(func() { cancel(); w.Stop(); <-done }) }
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

// observe records one state of a PDB.
func (g *PDBGuard) observe(ns string, pdb *policyv1.PodDisruptionBudget) {
	s := pdb.Status
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.met == nil {
		g.met = map[string]metBudget{}
	}
	g.events++
	if s.ObservedGeneration > 0 && s.ExpectedPods > 0 && s.CurrentHealthy >= s.DesiredHealthy {
		g.met[pdb.Name] = metBudget{generation: s.ObservedGeneration, desired: s.DesiredHealthy}
	}
	last, ok := g.met[pdb.Name]
	if ok && s.CurrentHealthy < s.DesiredHealthy && (last.generation == s.ObservedGeneration || s.CurrentHealthy < last.desired) {
		g.violations = append(g.violations, fmt.Sprintf("PDB %s/%s: %d healthy < %d desired at %s",
			ns, pdb.Name, s.CurrentHealthy, s.DesiredHealthy, time.Now().Format(time.StampMilli)))
	}
}
