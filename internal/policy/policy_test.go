package policy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func dp(name string, sel map[string]string) v1alpha1.DrainPolicy {
	p := v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if sel != nil {
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return p
}

func TestSelect(t *testing.T) {
	gpu := dp("gpu", map[string]string{"pool": "gpu"})
	zoneA := dp("zone-a", map[string]string{"zone": "a"})
	byName := dp("by-name-only", nil)
	def := dp(v1alpha1.DefaultPolicyName, nil)
	broken := dp("broken", nil)
	broken.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Sometimes"}}}

	for _, tc := range []struct {
		name      string
		labels    map[string]string
		policies  []v1alpha1.DrainPolicy
		want      string // "" for built-in defaults
		ambiguous bool
	}{
		{name: "no policies: built-in", labels: map[string]string{"pool": "gpu"}},
		{name: "selector matches", labels: map[string]string{"pool": "gpu"}, policies: []v1alpha1.DrainPolicy{gpu, def, byName}, want: "gpu"},
		{name: "nothing matches: default", labels: map[string]string{"pool": "web"}, policies: []v1alpha1.DrainPolicy{gpu, def}, want: "default"},
		{name: "nothing matches, no default: built-in", labels: map[string]string{"pool": "web"}, policies: []v1alpha1.DrainPolicy{gpu, byName}},
		{name: "a policy without selector never selects", labels: map[string]string{}, policies: []v1alpha1.DrainPolicy{byName}},
		{name: "two match: ambiguous", labels: map[string]string{"pool": "gpu", "zone": "a"}, policies: []v1alpha1.DrainPolicy{gpu, zoneA, def}, ambiguous: true},
		{name: "a broken selector: ambiguous", labels: map[string]string{"pool": "web"}, policies: []v1alpha1.DrainPolicy{broken, def}, ambiguous: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := Select(tc.labels, tc.policies)
			if tc.ambiguous {
				if !IsAmbiguous(err) {
					t.Fatalf("Select = %v, %v; want an ambiguity error", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tc.want || why == "" {
				t.Errorf("Select = %q (%s), want %q", name, why, tc.want)
			}
			for _, p := range tc.policies {
				if Governs(&p, tc.labels, tc.policies) != (p.Name == tc.want) {
					t.Errorf("Governs(%s) = %t, want %t", p.Name, !(p.Name == tc.want), p.Name == tc.want)
				}
			}
		})
	}
	err := (&AmbiguousError{Names: []string{"gpu", "zone-a"}}).Error()
	if err != "DrainPolicies gpu, zone-a all select the node; nothing is drained until exactly one does (narrow their nodeSelectors, or name one in spec.policyName)" {
		t.Errorf("message: %s", err)
	}
}

func TestEndpointsDefaults(t *testing.T) {
	p, err := FromSpec("", v1alpha1.DrainPolicySpec{})
	if err != nil {
		t.Fatal(err)
	}
	if p.EndpointsSettle != DefaultEndpointsSettle || p.EndpointsTimeout != DefaultEndpointsTimeout {
		t.Errorf("defaults settle %s, timeout %s; want %s and %s", p.EndpointsSettle, p.EndpointsTimeout, DefaultEndpointsSettle, DefaultEndpointsTimeout)
	}
	var s v1alpha1.DrainPolicySpec
	s.Endpoints.SettleTime, s.Endpoints.Timeout = &metav1.Duration{}, &metav1.Duration{Duration: 5 * time.Second}
	if p, err = FromSpec("fast", s); err != nil {
		t.Fatal(err)
	}
	if p.EndpointsSettle != 0 || p.EndpointsTimeout != 5*time.Second {
		t.Errorf("settle %s, timeout %s; want 0s (set, not defaulted) and 5s", p.EndpointsSettle, p.EndpointsTimeout)
	}
}
