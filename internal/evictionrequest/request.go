package evictionrequest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// A vacate drain as a requester. Where vacate requests through the API, a
// drain asks for the eviction of each pod that declares responders with an
// EvictionRequest of its own, and its pass follows the pod's Eviction.

// VacateResponder is vacate's responder name, for pods'
// spec.evictionResponders: vacate calls the pod's HTTP evacuation hook in
// its turn (internal/controller/coordinator).
const VacateResponder = "vacate.dev/evacuation"

// FinalizerHook keeps an Eviction whose pod's HTTP hook vacate called
// (as its responder) until the hook's cancel is over; vacate uninstall
// removes it once the controller is gone.
const FinalizerHook = "vacate.dev/hook"

// DrainRequester is the requester name of a vacate drain's EvictionRequests.
// Only vacate-controller may make or change a request in a vacate.dev name
// (the admission policy vacate-eviction-requests).
const DrainRequester = "vacate.dev/drain"

// DrainRequestName is the name the drains give their EvictionRequest for a
// pod: one per pod, so that a pass that does not see its own create yet
// does not make a second. (Someone else may take the name first: the
// drains then generate one; they find theirs by requester, Ours.)
func DrainRequestName(pod *corev1.Pod) string { return "vacate-drain-" + string(pod.UID) }

// Declares says whether the pod declares eviction responders: a drain that
// requests through the API asks for its eviction with an EvictionRequest.
func Declares(pod *corev1.Pod) bool { return len(pod.Spec.EvictionResponders) > 0 }

// DeclaresResponder says whether the pod names the responder.
func DeclaresResponder(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.EvictionResponders, func(r corev1.EvictionResponder) bool { return r.Name == name })
}

// DrainRequest is the drain's EvictionRequest for the pod, owned by the
// drain (the garbage collector deletes it with the drain, and with it the
// Eviction once no other request holds it).
func DrainRequest(pod *corev1.Pod, drain metav1.OwnerReference) *lifecyclev1alpha1.EvictionRequest {
	return &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: DrainRequestName(pod),
			OwnerReferences: []metav1.OwnerReference{drain},
		},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{
			Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: pod.Name, UID: pod.UID}},
			Requester: DrainRequester, Intent: lifecyclev1alpha1.EvictionRequestIntentEviction,
		},
	}
}

// Ours says whether the request is the drains' (requester
// vacate.dev/drain, which the admission policy vacate-eviction-requests
// keeps to vacate-controller) for this pod (not an earlier one of its
// name), and not being deleted.
func Ours(req *lifecyclev1alpha1.EvictionRequest, pod *corev1.Pod) bool {
	t := req.Spec.Target.Pod
	return req.Spec.Requester == DrainRequester && t != nil && t.UID == pod.UID && req.DeletionTimestamp.IsZero()
}

// WantedByOthers says whether a requester other than the one named still
// wants the Eviction (its status.requesters, as its coordinator wrote them).
func WantedByOthers(ev *lifecyclev1alpha1.Eviction, requester string) bool {
	return slices.ContainsFunc(ev.Status.Requesters, func(r lifecyclev1alpha1.Requester) bool {
		return r.Name != requester && r.Intent == lifecyclev1alpha1.RequesterIntentEviction
	})
}

// Progress says where the pod's Eviction is, for a drain's blocker and for
// people: the responder that has the turn, since when, when it expects to
// be done, and its message; or how it ended. ev may be nil (no coordinator
// made it yet). It changes only with what the responders report, not with
// the time (its heartbeats are left out): each change is a drain's status
// write.
func Progress(ev *lifecyclev1alpha1.Eviction) string {
	if ev == nil {
		return "asked for with an EvictionRequest; no Eviction yet: is a coordinator running (vacate-controller --eviction-requests, or Kubernetes' own)?"
	}
	for _, t := range []lifecyclev1alpha1.EvictionConditionType{lifecyclev1alpha1.EvictionConditionTargetEvicted, lifecyclev1alpha1.EvictionConditionFailed} {
		if c := meta.FindStatusCondition(ev.Status.Conditions, string(t)); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Sprintf("its Eviction ended %s (%s): %s", c.Type, c.Reason, c.Message)
		}
	}
	active := ActiveResponder(ev)
	if active == "" {
		return "its Eviction waits for its coordinator to give a responder the turn"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "responder %s has the turn", active)
	i := slices.IndexFunc(ev.Status.Responders, func(r lifecyclev1alpha1.ResponderStatus) bool { return r.Name == active })
	if i < 0 {
		return b.String()
	}
	st := ev.Status.Responders[i]
	if m := ptr.Deref(st.Message, ""); m != "" {
		b.WriteString(": " + m)
	}
	var when []string
	if st.StartTime != nil {
		when = append(when, "since "+st.StartTime.UTC().Format(time.RFC3339))
	}
	if st.ExpectedCompletionTime != nil {
		when = append(when, "expects to complete by "+st.ExpectedCompletionTime.UTC().Format(time.RFC3339))
	}
	if len(when) > 0 {
		b.WriteString(" (" + strings.Join(when, ", ") + ")")
	}
	return b.String()
}

// Blocker is what a drain's status says of a pod it asked for: held by its
// Eviction (or its request, before there is one), with its Progress.
func Blocker(pod *corev1.Pod, ev *lifecyclev1alpha1.Eviction, now time.Time) v1alpha1.Blocker {
	holder := "EvictionRequest " + pod.Namespace + "/" + DrainRequestName(pod)
	if ev != nil {
		holder = "Eviction " + ev.Namespace + "/" + ev.Name
	}
	return v1alpha1.Blocker{Pod: pod.Namespace + "/" + pod.Name, Reason: v1alpha1.BlockerEvictionRequest, Holder: holder,
		Detail: v1alpha1.Truncate(Progress(ev), v1alpha1.MaxMessage), Since: metav1.NewTime(now)}
}

// AskFailed is what a drain's status says of a pod it could not ask for
// (the API server refused the request, say): why, in the API server's
// words. The drain asks again at its next pass.
func AskFailed(pod *corev1.Pod, err error, now time.Time) v1alpha1.Blocker {
	b := Blocker(pod, nil, now)
	b.Detail = v1alpha1.Truncate("vacate could not ask for its eviction with an EvictionRequest: "+err.Error(), v1alpha1.MaxMessage)
	return b
}

// ActiveResponder is the name of the responder whose turn it is, or "".
func ActiveResponder(ev *lifecyclev1alpha1.Eviction) string {
	for _, t := range ev.Status.TargetResponders {
		if t.State == lifecyclev1alpha1.ResponderStateActive {
			return t.Name
		}
	}
	return ""
}
