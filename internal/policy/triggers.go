package policy

import (
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Wanted returns the trigger requesters a node calls for under these
// triggers, sorted by name: the trigger controller adds them to the node's
// NodeDrain, and `vacate uninstall` refuses to cancel a drain one of them
// would request again at once.
func (t Triggers) Wanted(node *corev1.Node) []v1alpha1.Requester {
	var out []v1alpha1.Requester
	for _, taint := range node.Spec.Taints {
		switch {
		case taint.Key == v1alpha1.TaintDrain && t.Taint:
			out = append(out, v1alpha1.Requester{Name: v1alpha1.RequesterTaint, Reason: "taint " + v1alpha1.TaintDrain + " (" + string(taint.Effect) + ")"})
		case slices.Contains(t.ExternalTaints, taint.Key):
			out = append(out, v1alpha1.Requester{Name: v1alpha1.RequesterExternalPrefix + taint.Key, Reason: "taint " + taint.Key + " from outside vacate"})
		}
	}
	if t.OnNodeDelete && !node.DeletionTimestamp.IsZero() && slices.Contains(node.Finalizers, v1alpha1.FinalizerDrain) {
		out = append(out, v1alpha1.Requester{Name: v1alpha1.RequesterDelete, Reason: "the node is being deleted (policy triggers.onNodeDelete: Drain)"})
	}
	if t.OnUnschedulable && node.Spec.Unschedulable && node.Annotations[v1alpha1.AnnotationCordonedBy] == "" {
		out = append(out, v1alpha1.Requester{Name: v1alpha1.RequesterCordon, Reason: "the node was cordoned (policy triggers.onUnschedulable: Drain)"})
	}
	if c := MaintenancePlanned(node); t.OnMaintenancePlanned && c != nil {
		reason := "node condition MaintenancePlanned=True"
		if c.Reason != "" {
			reason += " (" + c.Reason + ")"
		}
		if c.Message != "" {
			reason += ": " + c.Message
		}
		out = append(out, v1alpha1.Requester{Name: v1alpha1.RequesterMaintenance, Reason: v1alpha1.Truncate(reason+" (policy triggers.onMaintenancePlanned: Drain)", 256)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return dedupeRequesters(out)
}

// MaintenancePlanned is the node's condition MaintenancePlanned if it is
// True, else nil.
func MaintenancePlanned(node *corev1.Node) *corev1.NodeCondition {
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeMaintenancePlanned && c.Status == corev1.ConditionTrue {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// dedupeRequesters drops repeated names (a taint key with two effects),
// keeping the first.
func dedupeRequesters(rs []v1alpha1.Requester) []v1alpha1.Requester {
	out := rs[:0]
	for i, r := range rs {
		if i == 0 || rs[i-1].Name != r.Name {
			out = append(out, r)
		}
	}
	return out
}
