package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/config/admission"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
)

// TestOnlyThoseWhoMayEvictMayRequest is the abuse test of the coordinator's
// power (it evicts the pods EvictionRequests ask for): with the policy
// vacate-eviction-requests, a tenant whom RBAC lets create EvictionRequests
// but not evict pods cannot ask for a pod's eviction, nor turn a withdrawn
// request back to Eviction; one who may evict the pod can; withdrawing needs
// nothing more.
func TestOnlyThoseWhoMayEvictMayRequest(t *testing.T) {
	c, ns := withPolicy(t)
	ctx := testenv.Context(t)
	requestOnly := []rbacv1.PolicyRule{{APIGroups: []string{"lifecycle.k8s.io"}, Resources: []string{"evictionrequests"}, Verbs: []string{"create", "update", "get"}}}
	grant(t, c.Client, ns, "mallory", requestOnly)
	grant(t, c.Client, ns, "dana", append(requestOnly, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}))
	mallory, dana := as(t, c.RESTConfig, "mallory"), as(t, c.RESTConfig, "dana")

	// The policy takes a moment to be enforced: mallory's first refusal.
	var err error
	poll := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err = mallory.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, evictionRequest(ns, "by-mallory", lifecyclev1alpha1.EvictionRequestIntentEviction), metav1.CreateOptions{})
		if err == nil {
			// Created before the policy was enforced: not a pass.
			return false, c.Client.LifecycleV1alpha1().EvictionRequests(ns).Delete(ctx, "by-mallory", metav1.DeleteOptions{})
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may not ask for the eviction of pod "+ns+"/db-0"), nil
	})
	if poll != nil {
		t.Fatalf("mallory, who may not evict pods, asked for db-0's eviction: %v (last: %v)", poll, err)
	}

	// dana may evict, so may ask; mallory may withdraw but not ask again.
	req, err := dana.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, evictionRequest(ns, "by-dana", lifecyclev1alpha1.EvictionRequestIntentEviction), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("dana, who may evict db-0, was refused: %v", err)
	}
	if _, err := mallory.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, evictionRequest(ns, "withdrawn-by-mallory", lifecyclev1alpha1.EvictionRequestIntentWithdrawn), metav1.CreateOptions{}); err != nil {
		t.Errorf("a withdrawn request needs no right to evict: %v", err)
	}
	req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
	if req, err = mallory.LifecycleV1alpha1().EvictionRequests(ns).Update(ctx, req, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("withdrawing needs no right to evict: %v", err)
	}
	req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentEviction
	if _, err := mallory.LifecycleV1alpha1().EvictionRequests(ns).Update(ctx, req, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("mallory turned a withdrawn request back to Eviction: %v", err)
	}
	if _, err := dana.LifecycleV1alpha1().EvictionRequests(ns).Update(ctx, req, metav1.UpdateOptions{}); err != nil {
		t.Errorf("dana was refused asking again: %v", err)
	}
}

// TestNoOneElseRequestsInVacatesName: a drain's EvictionRequests are in
// vacate's name (vacate.dev/drain). A user who may evict the pod, and may
// create and update EvictionRequests, still cannot make a request in a
// vacate.dev name (so none passes for a drain's), nor change a drain's
// spec (withdraw it behind the drain's back); a metadata-only update (the
// garbage collector orphaning it) is RBAC's to allow; vacate-controller
// may change its own.
func TestNoOneElseRequestsInVacatesName(t *testing.T) {
	c, ns := withPolicy(t)
	ctx := testenv.Context(t)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"lifecycle.k8s.io"}, Resources: []string{"evictionrequests"}, Verbs: []string{"create", "update", "get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}}}
	const controller = "system:serviceaccount:vacate-system:vacate-controller"
	grant(t, c.Client, ns, "dana", rules)
	grant(t, c.Client, ns, controller, rules)
	dana, ctl := as(t, c.RESTConfig, "dana"), as(t, c.RESTConfig, controller)

	forged := evictionRequest(ns, "forged", lifecyclev1alpha1.EvictionRequestIntentEviction)
	forged.Spec.Requester = er.DrainRequester
	var err error
	poll := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err = dana.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, forged, metav1.CreateOptions{})
		if err == nil { // created before the policy was enforced: not a pass
			return false, c.Client.LifecycleV1alpha1().EvictionRequests(ns).Delete(ctx, forged.Name, metav1.DeleteOptions{})
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may not make or change a request in vacate's name"), nil
	})
	if poll != nil {
		t.Fatalf("dana made a request in vacate's name: %v (last: %v)", poll, err)
	}
	sub := evictionRequest(ns, "forged-sub", lifecyclev1alpha1.EvictionRequestIntentWithdrawn)
	sub.Spec.Requester = "nodes.vacate.dev/drain"
	if _, err := dana.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, sub, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("dana made a request in a name under vacate.dev (withdrawn): %v", err)
	}
	req, err := ctl.LifecycleV1alpha1().EvictionRequests(ns).Create(ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("vacate-controller was refused its own request: %v", err)
	}
	req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
	if _, err := dana.LifecycleV1alpha1().EvictionRequests(ns).Update(ctx, req, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("dana withdrew a drain's request: %v", err)
	}
	req.Spec.Intent, req.Labels = lifecyclev1alpha1.EvictionRequestIntentEviction, map[string]string{"example.com/note": "x"}
	if req, err = dana.LifecycleV1alpha1().EvictionRequests(ns).Update(ctx, req, metav1.UpdateOptions{}); err != nil {
		t.Errorf("a metadata-only update of a drain's request (as the garbage collector's orphaning) was refused: %v", err)
	}
	req.Spec.Intent = lifecyclev1alpha1.EvictionRequestIntentWithdrawn
	if _, err := ctl.LifecycleV1alpha1().EvictionRequests(ns).Update(ctx, req, metav1.UpdateOptions{}); err != nil {
		t.Errorf("vacate-controller was refused a change of its own request: %v", err)
	}
}

// withPolicy starts the shared cluster with the admission policy
// vacate-eviction-requests (removed when the test ends), and makes the
// test's namespace.
func withPolicy(t *testing.T) (*devcluster.Cluster, string) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	ns := testenv.Namespace(t, c)
	admin := testenv.DrainClient(t, c)
	for _, obj := range testenv.Objects(t, admission.EvictionRequestsYAML) {
		if err := admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("coordinator-test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), obj) })
	}
	return c, ns
}

// evictionRequest asks for pod db-0 (a name is all the check needs).
func evictionRequest(ns, name string, intent lifecyclev1alpha1.EvictionRequestIntent) *lifecyclev1alpha1.EvictionRequest {
	return &lifecyclev1alpha1.EvictionRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: lifecyclev1alpha1.EvictionRequestSpec{
			Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: "db-0", UID: types.UID("5f1f3c4e-0000-4000-8000-000000000001")}},
			Requester: "tenant.example.com/" + name, Intent: intent,
		},
	}
}

// grant gives user the rules in ns.
func grant(t *testing.T, cs kubernetes.Interface, ns, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := testenv.Context(t)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// as is a clientset acting as user (the admin impersonating them).
func as(t *testing.T, cfg *rest.Config, user string) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
