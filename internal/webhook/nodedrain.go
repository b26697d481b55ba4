package webhook

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// The NodeDrain policy webhook: a person (anyone without the verb manage
// on nodedrains) may name in a drain's spec.policyName only a DrainPolicy
// that may govern the drain's node. A grant "for the pool batch" is a verb
// on the DrainPolicy batch (use, force, an override's verb, decommission):
// without this check it would work on any node, since a drain may name any
// policy. The ValidatingAdmissionPolicy vacate-nodedrains checks the verbs;
// it cannot read a node's labels nor a policy's selector, so
// vacate-controller answers this one question, for the few requests that
// set or change spec.policyName (the API server's match conditions send no
// other).
//
// It fails closed (failurePolicy Fail): while no vacate-controller
// answers, a person cannot name a policy, but can still request a drain
// without one, join, leave or cancel a drain (which restate its policy
// unchanged and are not sent), and vacate's own requesters (the agent at a
// shutdown, the triggers: managers) are never sent.

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=vacate.dev,resources=drainpolicies,verbs=get;list;watch
// cert-controller injects the CA into this configuration too (update by
// name only; the admission policy vacate-controller-nodedrain-webhook
// limits the update to the webhook's CA bundle).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=update,resourceNames=vacate-nodedrain-policy

const (
	// NodeDrainPath is where the NodeDrain policy webhook is served.
	NodeDrainPath = "/validate-vacate-dev-v1alpha1-nodedrain-policy"
	// NodeDrainConfigurationName names its ValidatingWebhookConfiguration.
	NodeDrainConfigurationName = "vacate-nodedrain-policy"
	// NodeDrainWebhookName is the webhook's name, which the API server
	// quotes in its refusals and in its errors when the webhook does not
	// answer.
	NodeDrainWebhookName = "policy.nodedrains.vacate.dev"
)

// PolicyGate answers whether a drain may name the DrainPolicy it names:
// only one that may govern its node (MayName).
type PolicyGate struct {
	// Reader reads the node and the policy: vacate-controller's cache,
	// which its controllers decide from too. Not the API reader: anyone
	// who reaches the webhook's port can send it requests, and each must
	// not become calls to the API server that throttle the controller's
	// own (its drains).
	Reader  client.Reader
	Decoder admission.Decoder
}

var _ admission.Handler = (*PolicyGate)(nil)

// Handle allows every request that does not set or change spec.policyName
// (the configuration sends none, but a configuration edited by hand must
// never block a requester from leaving), and refuses one that names a
// policy its node may not be drained under.
func (h *PolicyGate) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Kind.Kind != "NodeDrain" || req.SubResource != "" ||
		(req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return admission.Allowed("only NodeDrains' creations and updates are checked")
	}
	nd := &v1alpha1.NodeDrain{}
	if err := h.Decoder.DecodeRaw(req.Object, nd); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the NodeDrain: %w", err))
	}
	name := nd.Spec.PolicyName
	if name == "" {
		return admission.Allowed("the drain names no policy")
	}
	if req.Operation == admissionv1.Update {
		old := &v1alpha1.NodeDrain{}
		if err := h.Decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the NodeDrain as it was: %w", err))
		}
		if old.Spec.PolicyName == name {
			return admission.Allowed("the drain's policy does not change")
		}
	}
	dp := &v1alpha1.DrainPolicy{}
	err := h.Reader.Get(ctx, types.NamespacedName{Name: name}, dp)
	switch {
	case apierrors.IsNotFound(err):
		return denied(fmt.Sprintf("DrainPolicy %s does not exist; name an existing policy, or drain without --policy (no spec.policyName) under the policy that selects node %s",
			name, nd.Spec.NodeName))
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading DrainPolicy %s: %w", name, err))
	}
	node := &corev1.Node{}
	err = h.Reader.Get(ctx, types.NamespacedName{Name: nd.Spec.NodeName}, node)
	switch {
	case apierrors.IsNotFound(err):
		return denied(fmt.Sprintf("node %s does not exist, so whether DrainPolicy %s selects it cannot be told; a person names a policy only for an existing node it selects (drain without --policy, or ask a cluster admin)",
			nd.Spec.NodeName, name))
	case err != nil:
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading node %s: %w", nd.Spec.NodeName, err))
	}
	if ok, why := MayName(dp, node); !ok {
		return denied(fmt.Sprintf("user %s may not name DrainPolicy %s for node %s: %s; a person names only a policy whose nodeSelector selects the node, "+
			"one without a nodeSelector, or %s (subjects with the verb manage on nodedrains are not limited): drain without --policy (no spec.policyName) "+
			"under the policy that selects the node, or ask a cluster admin (docs/policies.md, \"Which policy a drain may name\")",
			req.UserInfo.Username, name, nd.Spec.NodeName, why, v1alpha1.DefaultPolicyName))
	}
	return admission.Allowed("DrainPolicy " + name + " may govern node " + nd.Spec.NodeName)
}

// denied refuses with the cause on spec.policyName, as the API server's own
// admission policies state theirs, so that clients tell an admission
// refusal from a missing RBAC grant.
func denied(msg string) admission.Response {
	r := admission.Denied(msg)
	r.Result.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{
		Type: metav1.CauseTypeForbidden, Field: "spec.policyName", Message: msg}}}
	return r
}

// MayName reports whether a person may name dp in the drain of node, and
// if not, why: the policy named default may always be named (it governs
// the nodes no other policy selects), and so may a policy without a
// nodeSelector (it governs no node by selection and exists to be named: a
// grant on it is meant for any node); a policy with a nodeSelector may be
// named only for a node it selects. Whether another policy selects the
// node too does not matter: naming a policy is how a drain chooses among
// overlapping ones.
func MayName(dp *v1alpha1.DrainPolicy, node *corev1.Node) (bool, string) {
	if dp.Name == v1alpha1.DefaultPolicyName || dp.Spec.NodeSelector == nil {
		return true, ""
	}
	sel, err := metav1.LabelSelectorAsSelector(dp.Spec.NodeSelector)
	if err != nil {
		return false, fmt.Sprintf("the nodeSelector of DrainPolicy %s cannot be read (%v)", dp.Name, err)
	}
	if sel.Matches(labels.Set(node.Labels)) {
		return true, ""
	}
	return false, fmt.Sprintf("DrainPolicy %s does not select node %s (its nodeSelector %s; the node has %s)",
		dp.Name, node.Name, sel, selectedLabels(sel, node.Labels))
}

// selectedLabels says what the node has of the labels sel reads.
func selectedLabels(sel labels.Selector, l map[string]string) string {
	reqs, _ := sel.Requirements()
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		k := r.Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		if v, ok := l[k]; ok {
			out = append(out, k+"="+v)
		} else {
			out = append(out, "no "+k)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "no label it reads"
	}
	return strings.Join(out, ", ")
}

// NodeDrainConfiguration is the ValidatingWebhookConfiguration of the
// NodeDrain policy webhook reached at cc. The API server calls it only for
// creations and updates of NodeDrains that set or change spec.policyName,
// by subjects without the verb manage on nodedrains (match conditions,
// evaluated by the API server), and refuses those requests while it does
// not answer (failurePolicy Fail, a 10 s timeout).
func NodeDrainConfiguration(cc admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: NodeDrainConfigurationName, Labels: map[string]string{"app.kubernetes.io/part-of": "vacate"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         NodeDrainWebhookName,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
					Resources: []string{"nodedrains"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{
				{Name: "names-another-policy", Expression: "object.spec.?policyName.orValue('') != '' && " +
					"(request.operation == 'CREATE' || object.spec.?policyName.orValue('') != oldObject.spec.?policyName.orValue(''))"},
				{Name: "not-a-manager", Expression: "!authorizer.group('vacate.dev').resource('nodedrains').check('manage').allowed()"},
			},
		}},
	}
}
