package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// responderPod is a pod of namespace ns for the ResponderGate's tests,
// changed by each option.
func responderPod(ns string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db", Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withHook(p *corev1.Pod) { p.Annotations[hook.AnnotationPort] = "8080" }

func annotated(value string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[v1alpha1.LabelEvictionResponder] = value }
}

func labelled(k, v string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Labels[k] = v } }

func responders(names ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for i, n := range names {
			p.Spec.EvictionResponders = append(p.Spec.EvictionResponders,
				corev1.EvictionResponder{Name: n, Priority: ptr.To(int32(20000 + i))})
		}
	}
}

// TestResponderGateAnswers: the eviction-responder webhook's answers. It
// adds vacate's responder, with the configured priority, to an opted-in
// pod (by its namespace's label or its own annotation) that has an HTTP
// hook or that an EvacuationProvider selects, after the responders the pod
// declares, which it never changes; every other pod is allowed unchanged,
// with the reason. The real API server's calls are in
// TestWebhookDeclaresVacatesResponder.
func TestResponderGateAnswers(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	optedNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{v1alpha1.LabelEvictionResponder: "true", "tier": "data"}}}
	plainNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"tier": "data"}}}
	otherNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{v1alpha1.LabelEvictionResponder: "true"}}}
	volumes := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "volumes"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"storage": "replicated"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}}}
	// An AfterEviction provider cleans up after a drained node's pods left:
	// vacate's turn for one pod does not ask it.
	cleanup := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "cleanup"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"storage": "cleaned"}}, Stage: v1alpha1.StageAfterEviction}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(optedNS, plainNS, otherNS, volumes, cleanup).Build()
	gate := func(coordinating bool, priority int32) *webhook.ResponderGate {
		return &webhook.ResponderGate{Reader: reader, Decoder: admission.NewDecoder(scheme), Coordinating: coordinating, Priority: priority,
			ControllerNamespace: "vacate-system"}
	}
	raw := func(p *corev1.Pod) runtime.RawExtension {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	req := func(op admissionv1.Operation, p *corev1.Pod) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: p.Namespace,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: raw(p)}}
	}
	create := func(p *corev1.Pod) admission.Request { return req(admissionv1.Create, p) }
	// The one patch that adds vacate's entry, as the API server would read it.
	first := `add /spec/evictionResponders [{"name":"vacate.dev/evacuation","priority":5000}]`
	appended := `add /spec/evictionResponders/- {"name":"vacate.dev/evacuation","priority":5000}`
	full := make([]string, webhook.MaxEvictionResponders)
	for i := range full {
		full[i] = fmt.Sprintf("r%d.example.com/responder", i)
	}
	undecodable := create(responderPod("shop"))
	undecodable.Object = runtime.RawExtension{Raw: []byte("{not json")}
	subresource := create(responderPod("shop", withHook))
	subresource.SubResource = "status"
	for _, tc := range []struct {
		what  string
		gate  *webhook.ResponderGate
		req   admission.Request
		patch string // "" for none
		// reason is part of the message of an answer without a patch.
		reason string
	}{
		{"opted in by its namespace, with a hook", gate(true, 0), create(responderPod("shop", withHook)), first, ""},
		{"opted in by its annotation, with a hook", gate(true, 0), create(responderPod("plain", withHook, annotated("true"))), first, ""},
		{"opted in, selected by a provider", gate(true, 0), create(responderPod("shop", labelled("storage", "replicated"))), first, ""},
		{"opted in, the provider's namespace selector does not select it", gate(true, 0),
			create(responderPod("other", labelled("storage", "replicated"))), "", "no EvacuationProvider that its turn asks"},
		{"opted in, selected only by an AfterEviction provider", gate(true, 0),
			create(responderPod("shop", labelled("storage", "cleaned"))), "", "no EvacuationProvider that its turn asks"},
		{"opted in, no hook and no provider", gate(true, 0), create(responderPod("shop")), "", "vacate would not act for the pod"},
		{"opted out in an opted-in namespace", gate(true, 0), create(responderPod("shop", withHook, annotated("false"))), "", "the pod opted out"},
		{"not opted in", gate(true, 0), create(responderPod("plain", withHook)), "", "neither the pod nor its namespace opted in"},
		{"the priority configured", gate(true, 20000), create(responderPod("shop", withHook)),
			`add /spec/evictionResponders [{"name":"vacate.dev/evacuation","priority":20000}]`, ""},
		{"after the pod's own responders", gate(true, 0), create(responderPod("shop", withHook, responders("db.example.com/failover"))), appended, ""},
		{"already declared by the pod", gate(true, 0), create(responderPod("shop", withHook, responders(evictionrequest.VacateResponder))),
			"", "already declares vacate.dev/evacuation (kept as written)"},
		{"the list full", gate(true, 0), create(responderPod("shop", withHook, responders(full...))), "", "the most eviction responders the API allows (10)"},
		{"a scheduling group", gate(true, 0), create(responderPod("shop", withHook, func(p *corev1.Pod) {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{}
		})), "", "spec.schedulingGroup"},
		{"vacate not coordinating", gate(false, 0), create(responderPod("shop", withHook)), "", "vacate does not coordinate EvictionRequests"},
		{"an update", gate(true, 0), req(admissionv1.Update, responderPod("shop", withHook)), "", "only pod creations"},
		{"a subresource", gate(true, 0), subresource, "", "only pod creations"},
		{"the controller's namespace, opted in", gate(true, 0), create(responderPod("vacate-system", withHook, annotated("true"))), "", "never in namespace vacate-system"},
		{"kube-system, opted in", gate(true, 0), create(responderPod("kube-system", withHook, annotated("true"))), "", "never in namespace kube-system"},
		{"a namespace it cannot read", gate(true, 0), create(responderPod("gone", withHook)), "", "reading namespace gone"},
	} {
		resp := tc.gate.Handle(context.Background(), tc.req)
		var patches []string
		for _, p := range resp.Patches {
			v, err := json.Marshal(p.Value)
			if err != nil {
				t.Fatal(err)
			}
			patches = append(patches, p.Operation+" "+p.Path+" "+string(v))
		}
		got := strings.Join(patches, "; ")
		if !resp.Allowed || got != tc.patch {
			t.Errorf("%s: allowed %t, patch %q; want allowed, patch %q (%+v)", tc.what, resp.Allowed, got, tc.patch, resp.Result)
			continue
		}
		if tc.reason != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, tc.reason)) {
			t.Errorf("%s: answered %+v, want a reason with %q", tc.what, resp.Result, tc.reason)
		}
	}
	resp := gate(true, 0).Handle(context.Background(), undecodable)
	if resp.Allowed || resp.Result.Code != http.StatusBadRequest {
		t.Errorf("a pod it cannot decode: allowed %t, result %+v; want refused with 400", resp.Allowed, resp.Result)
	}
}

// TestResponderPriorityFlag: --eviction-responder-priority takes only what
// the API accepts for a responder outside k8s.io, 1000 to 100000.
func TestResponderPriorityFlag(t *testing.T) {
	for in, want := range map[string]string{
		"1000": "", "5000": "", "100000": "",
		"0": "must be from 1000 to 100000", "999": "must be from 1000 to 100000", "100001": "must be from 1000 to 100000",
		"-5": "must be from 1000 to 100000", "high": "not a number",
	} {
		_, err := webhook.ParseResponderPriority(in)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("--eviction-responder-priority %s: %v, want %q", in, err, want)
		}
	}
	if err := webhook.ValidateResponderPriority(0); err != nil {
		t.Errorf("an unset priority (the default): %v", err)
	}
}
