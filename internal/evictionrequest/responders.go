package evictionrequest

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/utils/ptr"
)

// Evictor is the default responder that ends every pod's Eviction: it evicts
// the pod through the Eviction API. The API server accepts it only at
// evictorPriority.
const Evictor = lifecyclev1alpha1.EvictionResponderImperativeEviction

const evictorPriority int32 = 100

// TargetResponders are the responders of an Eviction of pod, Inactive, in
// the order they take their turns: the pod's spec.evictionResponders and the
// evictor, ordered by Order.
func TargetResponders(pod *corev1.Pod) []lifecyclev1alpha1.TargetResponder {
	out := make([]lifecyclev1alpha1.TargetResponder, 0, len(pod.Spec.EvictionResponders)+1)
	for _, r := range pod.Spec.EvictionResponders {
		out = append(out, lifecyclev1alpha1.TargetResponder{Name: r.Name, Priority: ptr.To(ptr.Deref(r.Priority, 0)), State: lifecyclev1alpha1.ResponderStateInactive})
	}
	out = append(out, lifecyclev1alpha1.TargetResponder{Name: Evictor, Priority: ptr.To(evictorPriority), State: lifecyclev1alpha1.ResponderStateInactive})
	Order(out)
	return out
}

// Order sorts responders into the order the API server's validation gives
// their turns: higher priority first (none last); at equal priority by the
// domain of the name compared label by label from the top ("com" before
// "example"), a domain that is a suffix of the other's first; then by the key
// after the slash.
func Order(responders []lifecyclev1alpha1.TargetResponder) {
	slices.SortStableFunc(responders, func(a, b lifecyclev1alpha1.TargetResponder) int {
		switch {
		case a.Priority == nil && b.Priority != nil:
			return 1
		case a.Priority != nil && b.Priority == nil:
			return -1
		case a.Priority != nil && *a.Priority != *b.Priority:
			return cmp.Compare(*b.Priority, *a.Priority)
		}
		aDomain, aKey := domainLabels(a.Name)
		bDomain, bKey := domainLabels(b.Name)
		if c := slices.Compare(aDomain, bDomain); c != 0 {
			return c
		}
		return strings.Compare(aKey, bKey)
	})
}

// domainLabels splits a domain-prefixed name into its domain's labels, top
// first, and the key after the slash.
func domainLabels(name string) ([]string, string) {
	domain, key, _ := strings.Cut(name, "/")
	labels := strings.Split(domain, ".")
	slices.Reverse(labels)
	return labels, key
}
