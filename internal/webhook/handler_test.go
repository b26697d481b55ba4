package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// TestPodGateAnswers: the handler's answers to what the API server may
// send besides a plain opted-in creation: an update, an undecodable pod, a
// namespace it cannot read (fails open), a pod that already has the gate.
// The real API server's calls are in TestWebhookGatesOptedInPods.
func TestPodGateAnswers(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{v1alpha1.LabelEndpointAware: "true"}}}
	h := &webhook.PodGate{Namespaces: fake.NewClientBuilder().WithScheme(scheme).WithObjects(shop).Build(), Decoder: admission.NewDecoder(scheme)}
	raw := func(p *corev1.Pod) runtime.RawExtension {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	pod := func(ns string, gated bool) *corev1.Pod {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if gated {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.ConditionServing}}
		}
		return p
	}
	labelled := func(p *corev1.Pod) *corev1.Pod {
		p.Labels = map[string]string{v1alpha1.LabelEndpointAware: "true"}
		return p
	}
	req := func(op admissionv1.Operation, ns string, obj runtime.RawExtension) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: ns,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: obj}}
	}
	for _, tc := range []struct {
		what    string
		req     admission.Request
		allowed bool
		patches int
		code    int32
	}{
		// The gate, and the label vacate-controller finds gated pods by.
		{"a creation in a labelled namespace", req(admissionv1.Create, "shop", raw(pod("shop", false))), true, 2, 0},
		{"an update", req(admissionv1.Update, "shop", raw(pod("shop", false))), true, 0, 0},
		{"a pod that already has the gate, not the label", req(admissionv1.Create, "shop", raw(pod("shop", true))), true, 1, 0},
		{"a pod that already has the gate and the label", req(admissionv1.Create, "shop", raw(labelled(pod("shop", true)))), true, 0, 0},
		{"a namespace it cannot read", req(admissionv1.Create, "gone", raw(pod("gone", false))), true, 0, 0},
		{"a pod it cannot decode", req(admissionv1.Create, "shop", runtime.RawExtension{Raw: []byte("{not json")}), false, 0, http.StatusBadRequest},
	} {
		resp := h.Handle(context.Background(), tc.req)
		if resp.Allowed != tc.allowed || len(resp.Patches) != tc.patches || (tc.code != 0 && resp.Result.Code != tc.code) {
			t.Errorf("%s: allowed %t, %d patch(es), result %+v; want allowed %t, %d patch(es), code %d",
				tc.what, resp.Allowed, len(resp.Patches), resp.Result, tc.allowed, tc.patches, tc.code)
		}
	}
}
