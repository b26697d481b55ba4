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

// LabelDrain labels a drain's EvictionRequests with the drain's name (its
// node's), so that its undo finds them.
const LabelDrain = "vacate.dev/drain"

// DrainRequestName is the name of the drains' EvictionRequest for a pod: one
// per pod, so a pass finds it again after a restart, and a later drain of
// the node asks with the same one.
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
			Labels:          map[string]string{LabelDrain: drain.Name},
			OwnerReferences: []metav1.OwnerReference{drain},
		},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{
			Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: pod.Name, UID: pod.UID}},
			Requester: DrainRequester, Intent: lifecyclev1alpha1.EvictionRequestIntentEviction,
		},
	}
}

// Asks says whether the request asks for the eviction of the pod (this pod,
// not an earlier one of its name).
func Asks(req *lifecyclev1alpha1.EvictionRequest, pod *corev1.Pod) bool {
	t := req.Spec.Target.Pod
	return t != nil && t.UID == pod.UID && req.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction && req.DeletionTimestamp.IsZero()
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

// ActiveResponder is the name of the responder whose turn it is, or "".
func ActiveResponder(ev *lifecyclev1alpha1.Eviction) string {
	for _, t := range ev.Status.TargetResponders {
		if t.State == lifecyclev1alpha1.ResponderStateActive {
			return t.Name
		}
	}
	return ""
}
