package index_test

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestAnySelected: the drained nodes a PDB's change wakes are those with a
// pod it selects; a pod that carries one of its labels but fails the rest
// of the selector, or lives in another namespace, does not count.
func TestAnySelected(t *testing.T) {
	objs := []*corev1.Pod{
		testutil.Pod("web-1").OnNode("n1").Labels("app", "web", "tier", "front").Obj(),
		testutil.Pod("web-2").OnNode("n2").Labels("app", "web", "tier", "front").Obj(),
		testutil.Pod("web-canary").OnNode("n3").Labels("app", "web", "tier", "canary").Obj(),
		testutil.Pod("web-pending").Labels("app", "web", "tier", "front").Obj(), // not bound: no node
		testutil.Pod("api-1").OnNode("n4").Labels("app", "api").Obj(),
		testutil.Pod("web-other").Namespace("other").OnNode("n5").Labels("app", "web", "tier", "front").Obj(),
	}
	byNode := map[string][]*corev1.Pod{}
	for _, p := range objs {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	pdb := func(sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}
	}
	for _, tc := range []struct {
		name string
		sel  *metav1.LabelSelector
		want []string
	}{
		{"matchLabels", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "front"}}, []string{"n1", "n2"}},
		{"matchLabels and an expression", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"front"}}}}, []string{"n3"}},
		{"expressions only", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"api", "web"}}}}, []string{"n1", "n2", "n3", "n4"}},
		{"empty: every pod of the namespace", &metav1.LabelSelector{}, []string{"n1", "n2", "n3", "n4"}},
		{"none", nil, nil},
		{"a label no pod has", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := metav1.LabelSelectorAsSelector(pdb(tc.sel).Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range slices.Sorted(maps.Keys(byNode)) {
				if n != "" && index.AnySelected(byNode[n], "default", sel) {
					got = append(got, n)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("nodes %v, want %v", got, tc.want)
			}
		})
	}
}
