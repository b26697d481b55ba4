package admission

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// batched is a drain of node whose requester entries carry the batches
// given as "requester/id/size" ("requester" alone: no batch).
func batched(node string, entries ...string) v1alpha1.NodeDrain {
	nd := v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node, UID: types.UID("uid-" + node)}, Spec: v1alpha1.NodeDrainSpec{NodeName: node}}
	for _, e := range entries {
		var name, id string
		var size int32
		if n, _ := fmt.Sscanf(e, "%s %s %d", &name, &id, &size); n == 3 {
			nd.Spec.Requesters = append(nd.Spec.Requesters, v1alpha1.Requester{Name: name, Batch: &v1alpha1.RequestBatch{ID: id, Size: size}})
			continue
		}
		nd.Spec.Requesters = append(nd.Spec.Requesters, v1alpha1.Requester{Name: e})
	}
	return nd
}

func TestCompleteBatchesAreExactlyTheDeclaredSize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		drains []v1alpha1.NodeDrain
		want   []string
	}{
		{"all three present", []v1alpha1.NodeDrain{batched("a", "cli:x b1 3"), batched("b", "cli:x b1 3"), batched("c", "cli:x b1 3")}, []string{"a", "b", "c"}},
		{"two of three", []v1alpha1.NodeDrain{batched("a", "cli:x b1 3"), batched("b", "cli:x b1 3"), batched("c", "cli:x")}, nil},
		{"more than declared", []v1alpha1.NodeDrain{batched("a", "cli:x b1 1"), batched("b", "cli:x b1 1")}, nil},
		{"sizes disagree", []v1alpha1.NodeDrain{batched("a", "cli:x b1 2"), batched("b", "cli:x b1 3"), batched("c", "cli:x b1 3")}, nil},
		{"another requester cannot complete it", []v1alpha1.NodeDrain{batched("a", "cli:x b1 2"), batched("b", "cli:y b1 2")}, nil},
		{"one of a drain's requesters", []v1alpha1.NodeDrain{batched("a", "taint", "cli:x b1 2"), batched("b", "cli:x b1 2"), batched("c", "cli:y b2 2")}, []string{"a", "b"}},
		{"a batch of one", []v1alpha1.NodeDrain{batched("a", "cli:x b1 1"), batched("b", "agent")}, []string{"a"}},
		{"no batch", []v1alpha1.NodeDrain{batched("a", "cli:x"), batched("b", "taint")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ms []*member
			for i := range tc.drains {
				ms = append(ms, &member{drain: &tc.drains[i]})
			}
			complete := completeBatches(ms)
			var got []string
			for _, nd := range tc.drains {
				if _, ok := complete[nd.UID]; ok {
					got = append(got, nd.Name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("complete batches' drains %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlanAdmitsACompleteBatchWithoutTheWindowOnly: under a batch window of
// an hour, a pass right after the requests admits a complete batch at once
// (no more drains than maxParallelNodes), and nothing else: an incomplete
// or lying batch, a drain without one, and a complete batch while a drain
// outside it still gathers (it is never served before a drain requested
// earlier) all wait for the window.
func TestPlanAdmitsACompleteBatchWithoutTheWindowOnly(t *testing.T) {
	now := time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)
	pol, err := policy.FromSpec("fleet", v1alpha1.DrainPolicySpec{Concurrency: v1alpha1.Concurrency{BatchWindow: &metav1.Duration{Duration: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		drains   []v1alpha1.NodeDrain
		limit    int
		admitted []string
	}{
		{"complete", []v1alpha1.NodeDrain{batched("a", "cli:x b1 2"), batched("b", "cli:x b1 2")}, 5, []string{"a", "b"}},
		{"complete, under maxParallelNodes 2", []v1alpha1.NodeDrain{batched("a", "cli:x b1 3"), batched("b", "cli:x b1 3"), batched("c", "cli:x b1 3")}, 2, []string{"a", "b"}},
		{"incomplete", []v1alpha1.NodeDrain{batched("a", "cli:x b1 3"), batched("b", "cli:x b1 3")}, 5, nil},
		{"lying: fewer than carry it", []v1alpha1.NodeDrain{batched("a", "cli:x b1 1"), batched("b", "cli:x b1 1")}, 5, nil},
		{"a drain outside it gathers", []v1alpha1.NodeDrain{batched("a", "cli:x b1 2"), batched("b", "cli:x b1 2"), batched("c", "taint")}, 5, nil},
		{"two complete batches", []v1alpha1.NodeDrain{batched("a", "cli:x b1 1"), batched("b", "cli:y b2 1")}, 5, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &queue{key: "fleet", policy: pol, now: now, all: tc.drains, nodes: map[string]*corev1.Node{}, needs: map[string]need{},
				limits: schedule.Limits{MaxParallel: tc.limit}}
			for i := range tc.drains {
				nd := &tc.drains[i]
				nd.Status.RequestTime = &metav1.Time{Time: now.Add(-time.Second)}
				q.waiting = append(q.waiting, &member{drain: nd, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.Name}}})
			}
			p := q.plan()
			var got []string
			for _, uid := range p.order {
				got = append(got, string(uid)[len("uid-"):])
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.admitted) {
				t.Errorf("admitted %v, want %v", got, tc.admitted)
			}
			for _, nd := range tc.drains {
				if v := p.verdicts[nd.UID]; !v.Admit && !slices.Contains(tc.admitted, nd.Name) && v.Reason == "" {
					t.Errorf("%s: no verdict", nd.Name)
				}
			}
			if len(got) == 0 && p.wake > time.Hour {
				t.Errorf("nothing admitted and the next pass in %s, want within the window", p.wake)
			}
		})
	}
}

// TestOnlyDropsTheSkippedWhenAnUncordonedDrainAppears: the confirming read
// found a drain the cordoning pass did not know (the cache lagged); it may
// be of the batch that skips the window, so the pass admits none of that
// batch: the next pass, which cordons it, decides.
func TestOnlyDropsTheSkippedWhenAnUncordonedDrainAppears(t *testing.T) {
	now := time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)
	pol, err := policy.FromSpec("fleet", v1alpha1.DrainPolicySpec{Concurrency: v1alpha1.Concurrency{BatchWindow: &metav1.Duration{Duration: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	drains := []v1alpha1.NodeDrain{batched("a", "cli:x b1 2"), batched("b", "cli:x b1 2")}
	q := &queue{key: "fleet", policy: pol, now: now, nodes: map[string]*corev1.Node{}, needs: map[string]need{}, limits: schedule.Limits{MaxParallel: 5}}
	for i := range drains {
		q.waiting = append(q.waiting, &member{drain: &drains[i], node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drains[i].Name}}})
	}
	if p := q.plan().only(q.waiting); len(p.order) != 2 {
		t.Fatalf("with both drains cordoned: admitted %v, want both", p.order)
	}
	p := q.plan().only(q.waiting[:1]) // the cordoning pass knew a only
	if len(p.order) != 0 || len(p.verdicts) != 0 {
		t.Errorf("admitted %v with verdicts %v, want nothing decided this pass", p.order, p.verdicts)
	}
}

// TestTogetherWritesABatchAtOnceAndOthersInTurn: the admissions of a
// pass, in order, are written in runs: the drains of one complete batch
// that follow each other in one run; a drain outside complete batches,
// or of another batch, in a run of its own, so a pass cut short admitted
// what was requested first.
func TestTogetherWritesABatchAtOnceAndOthersInTurn(t *testing.T) {
	b1, b2 := batchKey{requester: "cli:x", id: "1"}, batchKey{requester: "cli:y", id: "2"}
	complete := map[types.UID]batchKey{"a1": b1, "a2": b1, "a3": b1, "b1": b2, "b2": b2}
	for _, tc := range []struct {
		name  string
		order []types.UID
		want  string
	}{
		{"no batch", []types.UID{"x", "y", "z"}, "[x] [y] [z]"},
		{"one batch", []types.UID{"a1", "a2", "a3"}, "[a1 a2 a3]"},
		{"a lone drain first", []types.UID{"x", "a1", "a2"}, "[x] [a1 a2]"},
		{"two batches", []types.UID{"a1", "a2", "b1", "b2", "a3"}, "[a1 a2] [b1 b2] [a3]"},
		{"a batch cut by a lone drain", []types.UID{"a1", "x", "a2"}, "[a1] [x] [a2]"},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []string
			for _, run := range together(tc.order, complete) {
				runs = append(runs, fmt.Sprint(run))
			}
			if got := strings.Join(runs, " "); got != tc.want {
				t.Errorf("runs %s, want %s", got, tc.want)
			}
		})
	}
}
