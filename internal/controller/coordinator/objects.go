package coordinator

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// forUID are the requests whose target is the pod of that UID.
func forUID(requests []lifecyclev1alpha1.EvictionRequest, uid types.UID) []lifecyclev1alpha1.EvictionRequest {
	var out []lifecyclev1alpha1.EvictionRequest
	for _, r := range requests {
		if r.Spec.Target.Pod != nil && r.Spec.Target.Pod.UID == uid {
			out = append(out, r)
		}
	}
	return out
}

// wants reports whether the request asks for the eviction now.
func wants(r *lifecyclev1alpha1.EvictionRequest) bool {
	return r.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction && r.DeletionTimestamp.IsZero()
}

func anyWants(requests []lifecyclev1alpha1.EvictionRequest) bool {
	return slices.ContainsFunc(requests, func(r lifecyclev1alpha1.EvictionRequest) bool { return wants(&r) })
}

// askedAgain reports whether a final Eviction must make room for a new one:
// it was cancelled (every requester withdrew) and a requester wants the pod
// out again, or a request that wants it was made after it ended. An
// Eviction that evicted its pod is never replaced: the pod is gone.
func askedAgain(ev *lifecyclev1alpha1.Eviction, requests []lifecyclev1alpha1.EvictionRequest) bool {
	failed := meta.FindStatusCondition(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionFailed))
	if failed == nil || failed.Status != metav1.ConditionTrue {
		return false
	}
	for i := range requests {
		r := &requests[i]
		if !wants(r) {
			continue
		}
		if failed.Reason == string(lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters) ||
			failed.LastTransitionTime.Before(&r.CreationTimestamp) {
			return true
		}
	}
	return false
}

// requesterNames names the requests' requesters, each once, sorted.
func requesterNames(requests []lifecyclev1alpha1.EvictionRequest) []string {
	var out []string
	for _, r := range requests {
		if !slices.Contains(out, r.Spec.Requester) {
			out = append(out, r.Spec.Requester)
		}
	}
	sort.Strings(out)
	return out
}

// responderOrder names responders in turn order, with their priorities.
func responderOrder(responders []lifecyclev1alpha1.TargetResponder) string {
	out := make([]string, 0, len(responders))
	for _, t := range responders {
		p := ""
		if t.Priority != nil {
			p = " (" + strconv.Itoa(int(*t.Priority)) + ")"
		}
		out = append(out, t.Name+p)
	}
	return strings.Join(out, ", ")
}

// sameResponders reports whether the Eviction's responders, once its status
// lists them, are its pod's: the same names at the same priorities. The API
// server orders whatever list the first status write gives and never checks
// it against the pod.
func sameResponders(ev *lifecyclev1alpha1.Eviction, pod *corev1.Pod) bool {
	if len(ev.Status.TargetResponders) == 0 {
		return true
	}
	key := func(rs []lifecyclev1alpha1.TargetResponder) []string {
		out := make([]string, 0, len(rs))
		for _, t := range rs {
			out = append(out, fmt.Sprintf("%s=%d", t.Name, ptrInt(t.Priority)))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(ev.Status.TargetResponders), key(er.TargetResponders(pod)))
}

func ptrInt(p *int32) int64 {
	if p == nil {
		return -1
	}
	return int64(*p)
}

// sameOwners compares owner references by UID, in any order.
func sameOwners(a, b []metav1.OwnerReference) bool {
	uids := func(refs []metav1.OwnerReference) []types.UID {
		out := make([]types.UID, 0, len(refs))
		for _, r := range refs {
			out = append(out, r.UID)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(uids(a), uids(b))
}

// sameLabels reports whether have holds every label of want.
func sameLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func equalStatus(a, b lifecyclev1alpha1.EvictionStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

func equalRequestStatus(a, b lifecyclev1alpha1.EvictionRequestStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}

// byKey indexes PDBs by namespace/name.
func byKey(pdbs []*policyv1.PodDisruptionBudget) map[string]*policyv1.PodDisruptionBudget {
	out := make(map[string]*policyv1.PodDisruptionBudget, len(pdbs))
	for _, p := range pdbs {
		out[p.Namespace+"/"+p.Name] = p
	}
	return out
}

// allowNow reports whether every PDB allows a disruption now.
func allowNow(pdbs []*policyv1.PodDisruptionBudget) bool {
	for _, p := range pdbs {
		if p.Status.DisruptionsAllowed <= 0 {
			return false
		}
	}
	return true
}

// pdbState fingerprints what a retry of a refused eviction depends on:
// each PDB's generation, the generation its status saw, and the
// disruptions it allows (eviction.Refusal.RetriedAt).
func pdbState(pdbs []*policyv1.PodDisruptionBudget) string {
	parts := make([]string, 0, len(pdbs)+1)
	parts = append(parts, "pdbs") // never "", the state of a pod never retried
	for _, p := range pdbs {
		parts = append(parts, fmt.Sprintf("%s/%s=%d/%d/%d", p.Namespace, p.Name, p.Generation, p.Status.ObservedGeneration, p.Status.DisruptionsAllowed))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
