package policy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func TestLongestNodeDeletion(t *testing.T) {
	bounded := func(p v1alpha1.DrainPolicy, d time.Duration) v1alpha1.DrainPolicy {
		p.Spec.Timeouts.NodeDeletion = &metav1.Duration{Duration: d}
		return p
	}
	gpu := bounded(dp("gpu", map[string]string{"pool": "gpu"}), 5*time.Minute)
	fast := bounded(dp("fast", map[string]string{"disk": "ssd"}), 2*time.Hour)
	other := bounded(dp("other", map[string]string{"pool": "cpu"}), 9*time.Hour)
	def := bounded(dp(v1alpha1.DefaultPolicyName, nil), 3*time.Hour)
	broken := dp("broken", nil)
	broken.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Bogus"}}}
	broken = bounded(broken, 30*time.Minute)
	node := map[string]string{"pool": "gpu", "disk": "ssd"}
	for _, tc := range []struct {
		name     string
		policies []v1alpha1.DrainPolicy
		want     time.Duration
	}{
		{"two match: the longer of the two, not the default's nor another's", []v1alpha1.DrainPolicy{gpu, fast, other, def}, 2 * time.Hour},
		{"two match without a default set", []v1alpha1.DrainPolicy{gpu, bounded(dp("fast", map[string]string{"disk": "ssd"}), time.Minute)}, 5 * time.Minute},
		{"an unreadable selector: it, the matches and the default", []v1alpha1.DrainPolicy{gpu, broken, def, other}, 3 * time.Hour},
		{"an unreadable selector and no default: the built-in default", []v1alpha1.DrainPolicy{gpu, broken}, DefaultNodeDeletion},
		{"an unset bound counts as the built-in default", []v1alpha1.DrainPolicy{dp("gpu", map[string]string{"pool": "gpu"}), fast}, 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LongestNodeDeletion(node, tc.policies); got != tc.want {
				t.Errorf("LongestNodeDeletion = %s, want %s", got, tc.want)
			}
		})
	}
}
