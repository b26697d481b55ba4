// Package webhook holds vacate-controller's admission webhooks, served by
// one server with one certificate: the mutating webhook for endpoint-aware
// eviction (below), the mutating webhook that declares vacate's eviction
// responder (responder.go), and the validating NodeDrain policy webhook
// (nodedrain.go: a person names only a DrainPolicy that selects the
// drain's node).
//
// The endpoint-aware webhook adds the readiness gate vacate.dev/serving
// to pods created in namespaces labelled vacate.dev/endpoint-aware=true,
// or annotated so themselves (docs/endpoint-aware.md).
//
// The webhook can never block pod creation: it fails open (failurePolicy
// Ignore, a 5 s timeout), the API server calls it only for pods that opted
// in (a namespace selector, and CEL match conditions on the annotation; the
// control plane's own namespaces are never included), and it only ever
// adds the gate. Its serving certificate comes from cert-controller in a
// cluster (Rotator), and on the dev cluster from controller-runtime's envtest
// certificates (internal/dev/devwebhook, which vacate-controller does not link).
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/serving"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

const (
	// Path is where the webhook is served.
	Path = "/mutate-v1-pod-endpoint-aware"
	// ConfigurationName names the MutatingWebhookConfiguration.
	ConfigurationName = "vacate-endpoint-aware"
	// ServiceName is the Service in front of vacate-controller's webhook
	// server, in the controller's namespace.
	ServiceName = "vacate-webhook"
	// SecretName holds the webhook's serving certificate and its CA, which
	// cert-controller generates and rotates.
	SecretName = "vacate-webhook-cert"
	// Port is the webhook server's default port.
	Port = 9443
)

// Opt-in values of v1alpha1.LabelEndpointAware.
const (
	optIn  = "true"
	optOut = "false"
)

// PodGate adds the readiness gate to an opted-in pod at its creation
// (spec.readinessGates is immutable afterwards).
type PodGate struct {
	// Namespaces reads namespaces' labels: the API server calls the webhook
	// only for opted-in pods, and the handler checks again, so that a
	// configuration edited by hand cannot gate pods that did not ask.
	Namespaces client.Reader
	Decoder    admission.Decoder
}

var _ admission.Handler = (*PodGate)(nil)

// Handle answers one admission request: the gate added as a JSON patch, or
// the pod allowed unchanged with the reason.
func (h *PodGate) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return admission.Allowed("only pod creations are gated")
	}
	pod := &corev1.Pod{}
	if err := h.Decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err))
	}
	optedIn, why, err := h.optedIn(ctx, req.Namespace, pod)
	if err != nil {
		// Failing open is the configuration's policy too: the pod is
		// created without the gate, drained as an ungated pod is.
		return admission.Allowed("not gated: " + err.Error())
	}
	if !optedIn {
		return admission.Allowed(why)
	}
	if serving.Gated(pod) && pod.Labels[v1alpha1.LabelEndpointAware] == "true" {
		return admission.Allowed("the pod already has the readiness gate " + string(serving.Condition))
	}
	if !serving.Gated(pod) {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: serving.Condition})
	}
	// The label is how vacate-controller finds the pods whose condition
	// it sets, without watching every pod of the cluster.
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[v1alpha1.LabelEndpointAware] = "true"
	raw, err := json.Marshal(pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// optedIn: the pod's annotation decides when set; else its namespace's
// label.
func (h *PodGate) optedIn(ctx context.Context, namespace string, pod *corev1.Pod) (bool, string, error) {
	return optedIn(ctx, h.Namespaces, v1alpha1.LabelEndpointAware, namespace, pod)
}

// optedIn reads an opt-in key: the pod's annotation decides when set
// ("true" or "false"); else the label of the pod's namespace, read with r.
// The webhooks' configuration asks the same of the API server; each
// handler asks again, so that a configuration edited by hand cannot change
// pods that did not ask.
func optedIn(ctx context.Context, r client.Reader, key, namespace string, pod *corev1.Pod) (bool, string, error) {
	switch pod.Annotations[key] {
	case optIn:
		return true, "", nil
	case optOut:
		return false, "the pod opted out (annotation " + key + "=false)", nil
	}
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		return false, "", fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	if ns.Labels[key] == optIn {
		return true, "", nil
	}
	return false, "neither the pod nor its namespace opted in (" + key + "=true)", nil
}

// controlPlaneNamespaces never get the gate from the annotation webhook:
// pods there must never depend on vacate to become Ready.
var controlPlaneNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Configuration is the MutatingWebhookConfiguration for the webhooks
// reached at cc (a Service in a cluster, a URL on the dev cluster: its path
// is replaced by each webhook's own), excluding the controller's own
// namespace. Two pairs of webhooks, each pair one opt-in key: the
// endpoint-aware gate (Path, LabelEndpointAware) and vacate's eviction
// responder (ResponderPath, LabelEvictionResponder). In each pair, one
// webhook for the pods of labelled namespaces, one for annotated pods
// elsewhere; the API server evaluates the match conditions, so other pods
// never reach vacate. One configuration, so that the controller's right to
// inject the CA (RBAC and the policy vacate-controller-webhook, by name)
// covers both.
func Configuration(cc admissionregistrationv1.WebhookClientConfig, controllerNamespace string) *admissionregistrationv1.MutatingWebhookConfiguration {
	exclude := append([]string{controllerNamespace}, controlPlaneNamespaces...)
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName, Labels: map[string]string{"app.kubernetes.io/part-of": "vacate"}},
		Webhooks: append(optInWebhooks(at(cc, Path), v1alpha1.LabelEndpointAware, "endpoint-aware.vacate.dev", exclude),
			optInWebhooks(at(cc, ResponderPath), v1alpha1.LabelEvictionResponder, "eviction-responder.vacate.dev", exclude)...),
	}
}

// optInWebhooks are the two webhooks of one opt-in key, named
// namespaces.<suffix> and pods.<suffix>: pod creations only, failing open
// within 5 s, never in the excluded namespaces.
func optInWebhooks(cc admissionregistrationv1.WebhookClientConfig, key, suffix string, exclude []string) []admissionregistrationv1.MutatingWebhook {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	annotation := func(op, value string) string {
		return fmt.Sprintf("has(object.metadata.annotations) && %q in object.metadata.annotations && object.metadata.annotations[%q] %s %q", key, key, op, value)
	}
	hook := func(name string, sel *metav1.LabelSelector, cond admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            cc,
			Rules:                   rules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       sel,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			MatchConditions:         []admissionregistrationv1.MatchCondition{cond},
		}
	}
	return []admissionregistrationv1.MutatingWebhook{
		hook("namespaces."+suffix,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: key, Operator: metav1.LabelSelectorOpIn, Values: []string{optIn}},
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: exclude},
			}},
			admissionregistrationv1.MatchCondition{Name: "not-opted-out", Expression: "!(" + annotation("==", optOut) + ")"}),
		hook("pods."+suffix,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: key, Operator: metav1.LabelSelectorOpNotIn, Values: []string{optIn}},
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: exclude},
			}},
			admissionregistrationv1.MatchCondition{Name: "opted-in", Expression: annotation("==", optIn)}),
	}
}

// at is cc with its path (the Service's, or the URL's) set to path.
func at(cc admissionregistrationv1.WebhookClientConfig, path string) admissionregistrationv1.WebhookClientConfig {
	cc = *cc.DeepCopy()
	if cc.Service != nil {
		cc.Service.Path = &path
	}
	if cc.URL != nil {
		if u, err := url.Parse(*cc.URL); err == nil {
			u.Path = path
			cc.URL = ptr.To(u.String())
		}
	}
	return cc
}
