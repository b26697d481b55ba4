package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/webhook"
)

// TestPolicyGateAnswers: which DrainPolicy a person may name for which
// node, and what the handler does with what the API server may send
// besides a policy newly named: a policy it restates (joining or leaving a
// drain is never refused), no policy, a policy or node that does not
// exist, a selector it cannot read, a request it cannot decode. The real
// API server's calls are in test/rbac (TestNamedPolicyMustSelectTheNode).
func TestPolicyGateAnswers(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	selects := func(name, label string) *v1alpha1.DrainPolicy {
		return &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.DrainPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": label}}}}
	}
	bad := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1alpha1.DrainPolicySpec{NodeSelector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}}}}
	objs := []runtime.Object{
		selects("batch", "batch"), selects("web", "web"), bad,
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "anywhere"}},
		// default takes no selector; one written with a selector is still
		// the default, which may always be named.
		selects(v1alpha1.DefaultPolicyName, "nowhere"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b1", Labels: map[string]string{"pool": "batch"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Labels: map[string]string{"pool": "web", "zone": "a"}}},
	}
	h := &webhook.PolicyGate{Reader: fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objs...).Build(), Decoder: admission.NewDecoder(scheme)}
	raw := func(node, policy string) runtime.RawExtension {
		nd := &v1alpha1.NodeDrain{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain"},
			ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: v1alpha1.NodeDrainSpec{NodeName: node, PolicyName: policy}}
		b, err := json.Marshal(nd)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	create := func(node, policy string) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Group: "vacate.dev", Version: "v1alpha1", Kind: "NodeDrain"}, Object: raw(node, policy),
			UserInfo: authenticationv1.UserInfo{Username: "bea"}}}
	}
	update := func(node, from, to string) admission.Request {
		r := create(node, to)
		r.Operation, r.OldObject = admissionv1.Update, raw(node, from)
		return r
	}
	for _, tc := range []struct {
		what    string
		req     admission.Request
		allowed bool
		code    int32
		says    string
	}{
		{"a policy that selects the node", create("b1", "batch"), true, 0, ""},
		{"a policy that selects another pool", create("w1", "batch"), false, http.StatusForbidden,
			"user bea may not name DrainPolicy batch for node w1: DrainPolicy batch does not select node w1 (its nodeSelector pool=batch; the node has pool=web)"},
		{"a policy without a nodeSelector", create("w1", "anywhere"), true, 0, ""},
		{"default", create("w1", v1alpha1.DefaultPolicyName), true, 0, ""},
		{"no policy", create("w1", ""), true, 0, ""},
		{"a policy that does not exist", create("b1", "gone"), false, http.StatusForbidden, "DrainPolicy gone does not exist"},
		{"a node that does not exist", create("x1", "batch"), false, http.StatusForbidden, "node x1 does not exist"},
		{"a selector it cannot read", create("b1", "bad"), false, http.StatusForbidden, "the nodeSelector of DrainPolicy bad cannot be read"},
		{"moving a drain to another pool's policy", update("w1", "web", "batch"), false, http.StatusForbidden, "does not select node w1"},
		{"restating the policy the drain has", update("w1", "batch", "batch"), true, 0, ""},
		{"clearing the policy", update("w1", "batch", ""), true, 0, ""},
		{"a deletion", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Delete,
			Kind: metav1.GroupVersionKind{Kind: "NodeDrain"}}}, true, 0, ""},
		{"a request it cannot decode", admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Kind: "NodeDrain"}, Object: runtime.RawExtension{Raw: []byte("{not json")}}}, false, http.StatusBadRequest, ""},
	} {
		resp := h.Handle(context.Background(), tc.req)
		switch {
		case resp.Allowed != tc.allowed:
			t.Errorf("%s: allowed %t, want %t (%+v)", tc.what, resp.Allowed, tc.allowed, resp.Result)
		case tc.code != 0 && resp.Result.Code != tc.code:
			t.Errorf("%s: code %d, want %d (%+v)", tc.what, resp.Result.Code, tc.code, resp.Result)
		case tc.says != "" && !strings.Contains(resp.Result.Message, tc.says):
			t.Errorf("%s: %q lacks %q", tc.what, resp.Result.Message, tc.says)
		case !tc.allowed && tc.code == http.StatusForbidden &&
			(resp.Result.Details == nil || len(resp.Result.Details.Causes) != 1 || resp.Result.Details.Causes[0].Field != "spec.policyName"):
			t.Errorf("%s: the refusal states no cause on spec.policyName: %+v", tc.what, resp.Result.Details)
		}
	}
}
