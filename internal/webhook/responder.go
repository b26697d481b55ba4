package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/policy"
	"github.com/vacate-dev/vacate/internal/providers"
)

// The eviction-responder webhook declares vacate's responder
// (evictionrequest.VacateResponder) in spec.evictionResponders of the pods
// that opted in (v1alpha1.LabelEvictionResponder) and for which vacate
// would act in its turn: the pod has an HTTP evacuation hook, or an
// EvacuationProvider selects it. The field is set only at creation, so a
// pod's owner would otherwise write it into every template.
//
// It only ever adds vacate's entry: another responder is never changed nor
// removed, an entry of vacate's that the pod wrote is kept as written, and
// a pod is left unchanged where the API would refuse the addition (the list
// full, spec.schedulingGroup set). It fails open like the endpoint-aware
// webhook: a pod created while no vacate-controller answers is created
// without the declaration, and keeps none (the field cannot be changed
// later). Where vacate does not coordinate EvictionRequests (request-only,
// off, the API not served) nobody would answer vacate's responder, and the
// webhook adds nothing.

// The providers' selectors, read from the manager's cache.
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch

const (
	// ResponderPath is where the eviction-responder webhook is served.
	ResponderPath = "/mutate-v1-pod-eviction-responder"
	// DefaultResponderPriority is the priority of vacate's responder that
	// the webhook declares: below 10000, which the API suggests for the
	// pod's managing controller, so that such a responder goes first.
	DefaultResponderPriority int32 = 5000
	// MinResponderPriority and MaxResponderPriority bound the priority of
	// a responder whose name is not Kubernetes' own: 0 to 999 are reserved
	// for *.k8s.io responders (k8s.io/kubernetes pkg/apis/core/v1,
	// ValidateCustom_EvictionResponder_Priority).
	MinResponderPriority int32 = 1000
	MaxResponderPriority int32 = 100000
	// MaxEvictionResponders is the most responders a pod may declare
	// (k8s.io/kubernetes pkg/apis/core/validation, MaxPodEvictionResponders).
	MaxEvictionResponders = 10
)

// ValidateResponderPriority checks a priority for vacate's responder
// (--eviction-responder-priority); zero means DefaultResponderPriority.
func ValidateResponderPriority(p int32) error {
	if p == 0 || (p >= MinResponderPriority && p <= MaxResponderPriority) {
		return nil
	}
	return fmt.Errorf("--eviction-responder-priority %d: must be from %d to %d (0 to 999 are reserved for Kubernetes' own responders)",
		p, MinResponderPriority, MaxResponderPriority)
}

// ParseResponderPriority reads --eviction-responder-priority: a number in
// the range, zero included (it would not mean the default there).
func ParseResponderPriority(s string) (int32, error) {
	p, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("--eviction-responder-priority %q: not a number", s)
	}
	if p == 0 {
		return 0, fmt.Errorf("--eviction-responder-priority 0: must be from %d to %d (0 to 999 are reserved for Kubernetes' own responders)",
			MinResponderPriority, MaxResponderPriority)
	}
	return int32(p), ValidateResponderPriority(int32(p))
}

// ResponderGate declares vacate's responder on an opted-in pod at its
// creation.
type ResponderGate struct {
	// Reader reads namespaces' labels (the opt-in, checked again as
	// PodGate does, and the providers' namespace selectors) and
	// EvacuationProviders: the manager's cache.
	Reader  client.Reader
	Decoder admission.Decoder
	// Coordinating: vacate coordinates EvictionRequests and so answers as
	// its responder (controller.EvictionRequestRoles.Coordinate). Without
	// it the webhook adds nothing.
	Coordinating bool
	// Priority of the declared responder; zero: DefaultResponderPriority.
	Priority int32
	// ControllerNamespace is vacate-controller's own: its pods, like the
	// control plane's, never get vacate's responder, whatever the
	// configuration says.
	ControllerNamespace string
}

var _ admission.Handler = (*ResponderGate)(nil)

// Handle answers one admission request: vacate's responder added as a JSON
// patch, or the pod allowed unchanged with the reason.
func (h *ResponderGate) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("only pod creations are changed")
	}
	if req.Namespace == h.ControllerNamespace || slices.Contains(controlPlaneNamespaces, req.Namespace) {
		return admission.Allowed("never in namespace " + req.Namespace + " (the control plane's or vacate-controller's)")
	}
	if !h.Coordinating {
		return admission.Allowed("vacate does not coordinate EvictionRequests (--eviction-requests): nobody would answer its responder " +
			evictionrequest.VacateResponder)
	}
	pod := &corev1.Pod{}
	if err := h.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err))
	}
	if pod.Namespace == "" {
		// A pod created by a namespaced request need not name its
		// namespace; the providers' namespace selectors read it.
		pod.Namespace = req.Namespace
	}
	optedIn, why, err := optedIn(ctx, h.Reader, v1alpha1.LabelEvictionResponder, req.Namespace, pod)
	if err != nil {
		// Fails open, as the configuration does.
		return admission.Allowed("no responder declared: " + err.Error())
	}
	if !optedIn {
		return admission.Allowed(why)
	}
	if why := cannotDeclare(pod); why != "" {
		return admission.Allowed(why)
	}
	acts, why, err := h.vacateActs(ctx, pod)
	if err != nil {
		return admission.Allowed("no responder declared: " + err.Error())
	}
	if !acts {
		return admission.Allowed(why)
	}
	return admission.Patched("declared "+evictionrequest.VacateResponder+": "+why, h.declare(pod))
}

// cannotDeclare says why the pod's responders must stay as they are, or "":
// vacate's entry is already there (kept as the pod wrote it), or the API
// would refuse the pod with one more entry.
func cannotDeclare(pod *corev1.Pod) string {
	switch {
	case evictionrequest.DeclaresResponder(pod, evictionrequest.VacateResponder):
		return "the pod already declares " + evictionrequest.VacateResponder + " (kept as written)"
	case len(pod.Spec.EvictionResponders) >= MaxEvictionResponders:
		return fmt.Sprintf("the pod already declares the most eviction responders the API allows (%d)", MaxEvictionResponders)
	case pod.Spec.SchedulingGroup != nil:
		return "the pod sets spec.schedulingGroup, which the API does not allow with eviction responders"
	}
	return ""
}

// vacateActs says whether vacate would do something for the pod in its
// turn, and why: the pod's HTTP hook, or an EvacuationProvider that
// selects it and that the turn asks (not being deleted, BeforeEviction,
// taking part in Maintenance drains). A provider whose selectors cannot be read is
// passed over.
func (h *ResponderGate) vacateActs(ctx context.Context, pod *corev1.Pod) (bool, string, error) {
	if hook.Wants(pod) {
		return true, "the pod has an HTTP evacuation hook (" + hook.AnnotationPort + ")", nil
	}
	var list v1alpha1.EvacuationProviderList
	if err := h.Reader.List(ctx, &list); err != nil {
		return false, "", fmt.Errorf("listing EvacuationProviders: %w", err)
	}
	labelsOf := policy.NamespaceLabelsFrom(ctx, h.Reader)
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if !providers.Eligible(p, v1alpha1.ModeMaintenance) || providers.Stage(p) != v1alpha1.StageBeforeEviction {
			continue // vacate's turn asks only these (coordinator askProviders)
		}
		ok, err := providers.Selects(p, pod, labelsOf)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			return true, "EvacuationProvider " + p.Name + " selects the pod", nil
		}
	}
	why := "vacate would not act for the pod: no HTTP evacuation hook (" + hook.AnnotationPort + "), and no EvacuationProvider that its turn asks (BeforeEviction, taking part in Maintenance) selects it"
	if err := errors.Join(errs...); err != nil {
		why += " (passed over: " + err.Error() + ")"
	}
	return false, why, nil
}

// declare is the one JSON patch operation that adds vacate's entry at the
// end of the pod's responders: the others are neither moved nor rewritten.
func (h *ResponderGate) declare(pod *corev1.Pod) jsonpatch.JsonPatchOperation {
	entry := map[string]any{"name": evictionrequest.VacateResponder, "priority": h.priority()}
	if len(pod.Spec.EvictionResponders) == 0 {
		return jsonpatch.NewOperation("add", "/spec/evictionResponders", []any{entry})
	}
	return jsonpatch.NewOperation("add", "/spec/evictionResponders/-", entry)
}

func (h *ResponderGate) priority() int32 {
	if h.Priority == 0 {
		return DefaultResponderPriority
	}
	return h.Priority
}
