package policy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// LongestNodeDeletion is the bound on holding a deleted node whose policy is
// ambiguous (Select fails): the longest timeouts.nodeDeletion of the
// policies that may govern it. Those are the policies whose nodeSelector
// matches the node and those whose nodeSelector cannot be read; when a
// selector cannot be read, or none matches, also the fallback (the policy
// named default, else the built-in default). The node is never held longer
// than any of them would hold it, and never released sooner than the one
// meant would.
func LongestNodeDeletion(nodeLabels map[string]string, policies []v1alpha1.DrainPolicy) time.Duration {
	var longest time.Duration
	fallback := DefaultNodeDeletion
	matched, unreadable := false, false
	for i := range policies {
		dp := &policies[i]
		bound := durationOr(dp.Spec.Timeouts.NodeDeletion, DefaultNodeDeletion)
		if dp.Name == v1alpha1.DefaultPolicyName {
			fallback = bound
			continue
		}
		if dp.Spec.NodeSelector == nil {
			continue // only for drains that name it
		}
		sel, err := metav1.LabelSelectorAsSelector(dp.Spec.NodeSelector)
		switch {
		case err != nil:
			unreadable = true
		case sel.Matches(labels.Set(nodeLabels)):
			matched = true
		default:
			continue
		}
		longest = max(longest, bound)
	}
	if unreadable || !matched {
		longest = max(longest, fallback)
	}
	return longest
}
