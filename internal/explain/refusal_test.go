package explain

import (
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// TestExplainEvictionRefusals: every way the API server refuses an
// eviction other than a PDB's is explained with what it means and what to
// do, and none of them as a PodDisruptionBudget that allows no disruption.
func TestExplainEvictionRefusals(t *testing.T) {
	since := metav1.NewTime(now.Add(-2 * time.Minute))
	vap := `pods "web-1" is forbidden: ValidatingAdmissionPolicy 'freeze' with binding 'freeze' denied request: evictions are frozen`
	refused := func(pod, reason, holder, detail string) v1alpha1.Blocker {
		return v1alpha1.Blocker{Pod: pod, Reason: reason, Holder: holder, Detail: detail, Since: since}
	}
	twoPDBs := "PodDisruptionBudget shop/a, shop/b"
	multiple := "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
	budgets := map[string]*policyv1.PodDisruptionBudget{
		"shop/a": pdb("a", intstr.FromInt32(1), 2, 1, 2, 1),
		"shop/b": pdb("b", intstr.FromInt32(2), 3, 2, 3, 1),
	}

	for _, tc := range []struct {
		name    string
		in      Input
		want    []string // in the written explanation, in order
		notWant []string
	}{{
		name: "forbidden",
		in:   Input{Drain: stuck(refused("shop/web-1", v1alpha1.BlockerForbidden, "", vap))},
		want: []string{
			"1. pod shop/web-1 (for 2m00s)",
			"why:  the API server denied its eviction (HTTP 403): " + vap,
			"do:   find what denies it: an admission policy or webhook named in the message",
			"kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings",
			"kubectl get validatingwebhookconfigurations",
			"kubectl auth can-i create pods/eviction -n shop --as=system:serviceaccount:vacate-system:vacate-controller",
			"vacate retries with backoff",
		},
	}, {
		name: "invalid",
		in:   Input{Drain: stuck(refused("shop/web-1", v1alpha1.BlockerInvalid, "", vap))},
		want: []string{
			"why:  the API server rejected its eviction as invalid (HTTP 422): " + vap,
			"do:   an admission policy or webhook that denies with reason Invalid",
			"vacate retries with backoff",
		},
	}, {
		name: "two PDBs select the pods, a third pod is held by one of them alone",
		in: Input{Drain: stuck(
			refused("shop/api-1", v1alpha1.BlockerMultiplePDBs, twoPDBs, multiple),
			refused("shop/api-2", v1alpha1.BlockerMultiplePDBs, twoPDBs, multiple),
			pdbBlocker("shop/web-1", "shop/a")),
			PDBs: budgets},
		want: []string{
			"1. pod shop/web-1 (for 1m30s)",
			"why:  PDB shop/a refused an eviction, but allows 1 disruption(s) now",
			"2. pod shop/api-1, shop/api-2 (for 2m00s)",
			"why:  more than one PodDisruptionBudget selects them: shop/a (minAvailable 1), shop/b (minAvailable 2); " +
				"the Eviction API refuses to evict such a pod (HTTP 500): " + multiple,
			"do:   narrow the PDBs' selectors so that at most one selects each pod, or delete the redundant one " +
				"(kubectl get pdb -n shop a b -o yaml); vacate retries at once when only one is left",
		},
		notWant: []string{"PDB shop/b"},
	}, {
		name: "throttled",
		in: Input{Drain: stuck(
			refused("shop/web-1", v1alpha1.BlockerThrottled, v1alpha1.HolderThrottling, "Too many requests, please try again later."),
			refused("shop/web-2", v1alpha1.BlockerThrottled, v1alpha1.HolderThrottling, "Too many requests, please try again later."))},
		want: []string{
			"1. pod shop/web-1, shop/web-2 (for 2m00s)",
			"why:  the API server is throttling eviction calls (HTTP 429, not from a PodDisruptionBudget: API Priority and Fairness or another limit): " +
				"Too many requests, please try again later.",
			"do:   nothing while it passes: vacate backs off and waits at least as long as the API server asks (Retry-After)",
			"kubectl get flowschemas,prioritylevelconfigurations",
			"vacate-controller --eviction-qps",
		},
		notWant: []string{"PDB ", "allows no disruption"},
	}, {
		name: "failed",
		in:   Input{Drain: stuck(refused("shop/web-1", v1alpha1.BlockerFailed, "", "etcdserver: leader changed"))},
		want: []string{
			"why:  its eviction failed: etcdserver: leader changed",
			"do:   nothing if it passes: vacate retries with backoff; if it persists, look at the API server's health",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out := explains(t, tc.in, tc.want)
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("explanation has %q:\n%s", w, out)
				}
			}
		})
	}
}
