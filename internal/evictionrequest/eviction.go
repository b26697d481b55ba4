package evictionrequest

import (
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Eviction is the Eviction the coordinator creates for pod, asked for by
// requests: named after the pod (the API calls the name informative; the
// target identifies it), labelled with each requester's and responder's
// name and role as the API describes, and owned by every request, so that
// the garbage collector deletes it once the last request is gone.
func Eviction(pod *corev1.Pod, requests []lifecyclev1alpha1.EvictionRequest) *lifecyclev1alpha1.Eviction {
	labels := map[string]string{}
	responders := map[string]bool{}
	for _, r := range TargetResponders(pod) {
		labels[r.Name] = string(lifecyclev1alpha1.EvictionParticipantRoleResponder)
		responders[r.Name] = true
	}
	owners := make([]metav1.OwnerReference, 0, len(requests))
	for _, r := range requests {
		role := lifecyclev1alpha1.EvictionParticipantRoleRequester
		if responders[r.Spec.Requester] {
			role = lifecyclev1alpha1.EvictionParticipantRoleRequesterResponder
		}
		labels[r.Spec.Requester] = string(role)
		owners = append(owners, metav1.OwnerReference{
			APIVersion: GroupVersion.String(), Kind: "EvictionRequest", Name: r.Name, UID: r.UID,
			BlockOwnerDeletion: ptr.To(false),
		})
	}
	return &lifecyclev1alpha1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: labels, OwnerReferences: owners},
		Spec: lifecyclev1alpha1.EvictionSpec{Target: lifecyclev1alpha1.EvictionTarget{
			Pod: &lifecyclev1alpha1.EvictionPodReference{Name: pod.Name, UID: pod.UID},
		}},
	}
}
