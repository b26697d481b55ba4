package drain

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// evictionAPIGuards is the Eviction API's rule, pod by pod and PDB by PDB
// (pkg/registry/core/pod/storage/eviction.go, getPodDisruptionBudgets):
// same namespace, a selector that parses, is not empty and matches.
func evictionAPIGuards(p *corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) []string {
	var out []string
	for _, pdb := range pdbs {
		if pdb.Namespace != p.Namespace {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		out = append(out, pdb.Namespace+"/"+pdb.Name)
	}
	sort.Strings(out)
	return out
}

// TestGuardsFindWhatTheEvictionAPIFinds: Guards match a pod only against
// the PDBs filed under one of its labels (and those without matchLabels);
// over random pods and PDBs of every selector shape (none, empty,
// matchLabels, matchExpressions of each operator, both, unreadable), set,
// set again with another selector or status, and deleted in random order,
// they find exactly the PDBs the Eviction API's pod-by-PDB rule finds among
// the PDBs that exist, with their latest status.
func TestGuardsFindWhatTheEvictionAPIFinds(t *testing.T) {
	f := guardsFuzz{rng: rand.New(rand.NewPCG(1, 13))}
	matched := 0
	for round := range 200 {
		g := GuardsOf()
		if round%2 == 0 {
			g = nil // nil Guards know none; built fresh below
		}
		current := f.churn(g)
		var pdbs []*policyv1.PodDisruptionBudget
		for _, p := range current {
			pdbs = append(pdbs, p)
		}
		if g == nil {
			g = GuardsOf(pdbs...)
		}
		if g.Len() != len(pdbs) {
			t.Fatalf("round %d: Guards know %d PDBs, %d exist", round, g.Len(), len(pdbs))
		}
		for i := range 10 {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.pick(fuzzNamespaces), Name: fmt.Sprintf("pod-%d", i), Labels: f.labels()}}
			matched += checkGuardsOf(t, round, g, p, current, pdbs)
		}
	}
	if matched < 100 {
		t.Fatalf("only %d pod-PDB matches over every round: the random cases do not exercise matching", matched)
	}
}

// The namespaces, label keys and values the random pods and PDBs draw from.
var (
	fuzzNamespaces = []string{"a", "b"}
	fuzzKeys       = []string{"app", "tier", "zone"}
	fuzzValues     = []string{"x", "y", "z"}
)

// guardsFuzz draws the random pods and PDBs of
// TestGuardsFindWhatTheEvictionAPIFinds from one seeded source, so every
// run sees the same cases.
type guardsFuzz struct{ rng *rand.Rand }

func (f guardsFuzz) pick(xs []string) string { return xs[f.rng.IntN(len(xs))] }

// labels are a pod's: each key, or not, with a random value.
func (f guardsFuzz) labels() map[string]string {
	l := map[string]string{}
	for _, k := range fuzzKeys {
		if f.rng.IntN(3) > 0 {
			l[k] = f.pick(fuzzValues)
		}
	}
	return l
}

// selector is a PDB's, of every shape: none, empty, unreadable,
// matchLabels, matchExpressions of each operator, or both.
func (f guardsFuzz) selector() *metav1.LabelSelector {
	switch f.rng.IntN(8) {
	case 0:
		return nil
	case 1:
		return &metav1.LabelSelector{}
	case 2: // unreadable: In without values
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: f.pick(fuzzKeys), Operator: metav1.LabelSelectorOpIn}}}
	}
	sel := &metav1.LabelSelector{}
	if f.rng.IntN(3) > 0 {
		sel.MatchLabels = map[string]string{}
		for range 1 + f.rng.IntN(2) {
			sel.MatchLabels[f.pick(fuzzKeys)] = f.pick(fuzzValues)
		}
	}
	if f.rng.IntN(2) == 0 {
		ops := []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
		r := metav1.LabelSelectorRequirement{Key: f.pick(fuzzKeys), Operator: ops[f.rng.IntN(len(ops))]}
		if r.Operator == metav1.LabelSelectorOpIn || r.Operator == metav1.LabelSelectorOpNotIn {
			r.Values = []string{f.pick(fuzzValues), f.pick(fuzzValues)}
		}
		sel.MatchExpressions = append(sel.MatchExpressions, r)
	}
	return sel
}

// churn sets up to 23 random PDBs, setting some again with another
// selector or status and deleting some, and tells g (when not nil) of
// every change; it returns the PDBs that exist, by key.
func (f guardsFuzz) churn(g *Guards) map[string]*policyv1.PodDisruptionBudget {
	// The PDBs that exist, by key; Guards see every change of them.
	current := map[string]*policyv1.PodDisruptionBudget{}
	for range f.rng.IntN(24) {
		ns, name := f.pick(fuzzNamespaces), fmt.Sprintf("pdb-%d", f.rng.IntN(12))
		key := ns + "/" + name
		if old, ok := current[key]; ok && f.rng.IntN(4) == 0 {
			delete(current, key)
			if g != nil {
				g.Delete(ns, name)
			}
			continue
		} else if ok && f.rng.IntN(2) == 0 { // the same selector, another status
			next := old.DeepCopy()
			next.Status.DisruptionsAllowed = 1 - old.Status.DisruptionsAllowed
			current[key] = next
			if g != nil {
				g.Set(next)
			}
			continue
		}
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: f.selector()},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: int32(f.rng.IntN(2))},
		}
		current[key] = pdb
		if g != nil {
			g.Set(pdb)
		}
	}
	return current
}

// checkGuardsOf checks that g guards p with exactly the PDBs the Eviction
// API's rule finds among pdbs, that the plan keeps each at its latest
// (current), and that the blocking ones are those that allow no
// disruption; it returns how many PDBs match p.
func checkGuardsOf(t *testing.T, round int, g *Guards, p *corev1.Pod, current map[string]*policyv1.PodDisruptionBudget, pdbs []*policyv1.PodDisruptionBudget) int {
	t.Helper()
	want := evictionAPIGuards(p, pdbs)
	var d Decision
	var plan Plan
	plan.guard(&d, g.Of(p))
	got, blocked, blocking := d.PDBs, d.PDBBlocked, d.BlockingPDBs
	if !slices.Equal(got, want) {
		t.Fatalf("round %d: pod %s/%s labels %v: guards %v, the Eviction API's rule %v", round, p.Namespace, p.Name, p.Labels, got, want)
	}
	for _, k := range got {
		if plan.PDBs[k] != current[k] {
			t.Fatalf("round %d: the plan keeps %s as %v, its latest is %v", round, k, plan.PDBs[k], current[k])
		}
	}
	var wantBlocking []string
	for _, pdb := range pdbs {
		if slices.Contains(want, pdb.Namespace+"/"+pdb.Name) && pdb.Status.DisruptionsAllowed <= 0 {
			wantBlocking = append(wantBlocking, pdb.Namespace+"/"+pdb.Name)
		}
	}
	sort.Strings(wantBlocking)
	if !slices.Equal(blocking, wantBlocking) || blocked != (len(wantBlocking) > 0) {
		t.Fatalf("round %d: pod %s: blocking %v (blocked %t), want %v", round, p.Name, blocking, blocked, wantBlocking)
	}
	return len(want)
}

// TestPlanSeesAPDBAtOneVersion: Guards may change between two pods of one
// plan; the plan keeps the version it saw first, for every decision and
// for the budgets read from Plan.PDBs.
func TestPlanSeesAPDBAtOneVersion(t *testing.T) {
	v1 := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web", ResourceVersion: "1"},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}
	v2 := v1.DeepCopy()
	v2.ResourceVersion, v2.Status.DisruptionsAllowed = "2", 1
	var plan Plan
	var first, second Decision
	plan.guard(&first, []*policyv1.PodDisruptionBudget{v1})
	plan.guard(&second, []*policyv1.PodDisruptionBudget{v2})
	if plan.PDBs["a/web"] != v1 {
		t.Errorf("the plan keeps version %s, want the first it saw (1)", plan.PDBs["a/web"].ResourceVersion)
	}
	if !first.PDBBlocked || !second.PDBBlocked {
		t.Errorf("blocked: first pod %t, second %t; want both by the version the plan keeps (no disruption allowed)", first.PDBBlocked, second.PDBBlocked)
	}
}
