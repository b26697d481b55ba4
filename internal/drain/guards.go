package drain

import (
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Guards finds the PodDisruptionBudgets that select a pod, as the Eviction
// API decides it (same namespace, a non-empty selector that parses and
// matches its labels). A pod is matched only against its candidates: the
// PDBs of its namespace filed under one of its labels (a selector's least
// matchLabels key and value), and those whose selector has no matchLabels.
// A plan then costs its pods times their labels, not times the PDBs of the
// cluster.
//
// Guards are kept up to date PDB by PDB (Set, Delete): the NodeDrain
// controller keeps one from its PDB watch, and its passes read it instead of
// listing and indexing every PDB of the cluster each time. A selector is
// parsed when it changes, not on every read. Safe for concurrent use.
type Guards struct {
	mu    sync.RWMutex
	byKey map[string]*guard // namespace/name
	// byLabel files the PDBs with matchLabels; byNamespace, those without.
	byLabel     map[nsLabel]map[string]*guard
	byNamespace map[string]map[string]*guard
}

// guard is one PDB as Guards keep it: the object as last set (the cache's
// own; never changed), its key and parsed selector.
type guard struct {
	pdb *policyv1.PodDisruptionBudget
	key string
	// sel is nil for a selector that selects no pod (none, empty or
	// unreadable).
	sel labels.Selector
	// filed is where the PDB is filed; byNamespace when !labeled.
	filed   nsLabel
	labeled bool
}

type nsLabel struct{ namespace, key, value string }

// GuardsOf are the Guards of these PDBs.
func GuardsOf(pdbs ...*policyv1.PodDisruptionBudget) *Guards {
	g := &Guards{}
	for _, p := range pdbs {
		g.Set(p)
	}
	return g
}

// FilingLabel is the label a selector is looked up by: its least
// matchLabels key, and that key's value; false when it has no matchLabels.
// Every pod the selector matches carries that label.
func FilingLabel(sel *metav1.LabelSelector) (key, value string, ok bool) {
	if sel == nil || len(sel.MatchLabels) == 0 {
		return "", "", false
	}
	key = slices.Min(slices.Collect(maps.Keys(sel.MatchLabels)))
	return key, sel.MatchLabels[key], true
}

// Set adds the PDB or replaces what Guards knew of it (its status changes
// with every disruption). The object is kept, not copied: it must not be
// changed afterwards (the cache's objects never are).
func (g *Guards) Set(pdb *policyv1.PodDisruptionBudget) {
	key := pdb.Namespace + "/" + pdb.Name
	g.mu.Lock()
	defer g.mu.Unlock()
	if old := g.byKey[key]; old != nil && equality.Semantic.DeepEqual(old.pdb.Spec.Selector, pdb.Spec.Selector) {
		old.pdb = pdb // the same selector: only what it allows changed
		return
	}
	g.deleteLocked(key)
	gd := &guard{pdb: pdb, key: key}
	if sel := pdb.Spec.Selector; sel != nil {
		if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && !s.Empty() {
			gd.sel = s
		}
	}
	if gd.sel == nil {
		// Selects no pod; kept by key only, so that a later Set with a
		// selector replaces it.
		g.init()
		g.byKey[key] = gd
		return
	}
	if k, v, ok := FilingLabel(pdb.Spec.Selector); ok {
		gd.filed, gd.labeled = nsLabel{pdb.Namespace, k, v}, true
	} else {
		gd.filed = nsLabel{namespace: pdb.Namespace}
	}
	g.init()
	g.byKey[key] = gd
	if gd.labeled {
		add(g.byLabel, gd.filed, gd)
	} else {
		add(g.byNamespace, pdb.Namespace, gd)
	}
}

func add[K comparable](m map[K]map[string]*guard, k K, gd *guard) {
	if m[k] == nil {
		m[k] = map[string]*guard{}
	}
	m[k][gd.key] = gd
}

func (g *Guards) init() {
	if g.byKey == nil {
		g.byKey, g.byLabel, g.byNamespace = map[string]*guard{}, map[nsLabel]map[string]*guard{}, map[string]map[string]*guard{}
	}
}

// Delete forgets the PDB.
func (g *Guards) Delete(namespace, name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deleteLocked(namespace + "/" + name)
}

func (g *Guards) deleteLocked(key string) {
	gd := g.byKey[key]
	if gd == nil {
		return
	}
	delete(g.byKey, key)
	if gd.sel == nil {
		return
	}
	if gd.labeled {
		delete(g.byLabel[gd.filed], key)
		if len(g.byLabel[gd.filed]) == 0 {
			delete(g.byLabel, gd.filed)
		}
		return
	}
	delete(g.byNamespace[gd.filed.namespace], key)
	if len(g.byNamespace[gd.filed.namespace]) == 0 {
		delete(g.byNamespace, gd.filed.namespace)
	}
}

// Len is how many PDBs Guards know.
func (g *Guards) Len() int {
	if g == nil {
		return 0
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.byKey)
}

// Get is the PDB of that namespace/name as last set; nil if Guards do not
// know it.
func (g *Guards) Get(key string) *policyv1.PodDisruptionBudget {
	if g == nil {
		return nil
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if gd := g.byKey[key]; gd != nil {
		return gd.pdb
	}
	return nil
}

// Of returns the PDBs that select the pod, sorted by namespace/name, as
// last set. Nil Guards know no PDB.
func (g *Guards) Of(p *corev1.Pod) []*policyv1.PodDisruptionBudget {
	if g == nil {
		return nil
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []*guard
	check := func(gd *guard) {
		if gd.sel.Matches(labels.Set(p.Labels)) {
			out = append(out, gd)
		}
	}
	for k, v := range p.Labels {
		for _, gd := range g.byLabel[nsLabel{p.Namespace, k, v}] {
			check(gd)
		}
	}
	for _, gd := range g.byNamespace[p.Namespace] {
		check(gd)
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b *guard) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	pdbs := make([]*policyv1.PodDisruptionBudget, len(out))
	for i, gd := range out {
		pdbs[i] = gd.pdb
	}
	return pdbs
}
