// Package rbac holds the abuse tests of vacate's powers on the real dev
// cluster (docs/dev/security.md lists every power with its test): every
// rule of the RBAC and the ValidatingAdmissionPolicies that 'vacate
// manifests install' ships is tried as the controller's service account
// (impersonated), as people bound to vacate-user and as tenants, and each
// change they must not make is refused by the API server; the real
// vacate-hook is called by forged callers (hook_test.go). A new power gets
// its line in security.md and its test here, or beside the code it guards.
package rbac

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/requests"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const (
	namespace = "vacate-system"
	// serviceAccount is the user name of vacate-controller's service
	// account, as the API server sees it in a cluster.
	serviceAccount = "system:serviceaccount:" + namespace + ":vacate-controller"
	// patience bounds each wait: RBAC and admission policies take effect
	// when the API server's informers see them, slower under load.
	patience = 2 * time.Minute
)

// vacate runs the CLI with kubeconfig and returns its exit code and output.
func vacate(t *testing.T, kubeconfig string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := cli.Run(ctx, append(args, "--kubeconfig", kubeconfig), cli.Streams{In: strings.NewReader(""), Out: &out, Err: &out}, clock.RealClock{})
	t.Logf("$ vacate %s  → exit %d\n%s", strings.Join(args, " "), code, out.String())
	return code, out.String()
}

var installOnce sync.Once

// install applies what 'vacate manifests install' prints (with the given
// extra arguments), except the CRDs (testenv installs them), the
// controller's Deployment and PDB (the tests run the controller in
// process, as its service account) and the NodeDrain policy webhook's
// configuration, which fails closed: a test that runs the controller
// installs it on loopback (serveController).
func install(t *testing.T, c *devcluster.Cluster, args ...string) client.Client {
	t.Helper()
	cl := testenv.DrainClient(t, c)
	apply := func() {
		code, out := vacate(t, c.Kubeconfig, append([]string{"manifests", "install", "--image", "registry.example/vacate-controller:v0"}, args...)...)
		if code != 0 {
			t.Fatalf("vacate manifests install: exit %d", code)
		}
		applyYAML(t, cl, out)
	}
	if len(args) > 0 {
		apply()
		return cl
	}
	installOnce.Do(apply)
	return cl
}

func applyYAML(t *testing.T, cl client.Client, text string) {
	t.Helper()
	for _, obj := range testenv.Objects(t, text) {
		switch obj.GetKind() {
		case "CustomResourceDefinition", "Deployment", "PodDisruptionBudget", "ValidatingWebhookConfiguration":
			continue
		}
		err := cl.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("rbac-test"), client.ForceOwnership)
		if err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// asServiceAccount is the cluster's admin config impersonating
// vacate-controller's service account.
func asServiceAccount(c *devcluster.Cluster) *rest.Config {
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
	return cfg
}

func clientset(t *testing.T, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// startController runs vacate-controller in process as its service
// account until the test ends.
func startController(t *testing.T, c *devcluster.Cluster) {
	t.Helper()
	stop, err := operator.Start(context.Background(), asServiceAccount(c), operator.InProcessOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("controller exited with %v", err)
		}
	})
}

// check is eventually for a rule under test: it reports a failure and
// lets the test go on, so that every rule shows its own outcome.
func check(t *testing.T, what string, f func() error) bool {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, patience, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		t.Errorf("%s: %v", what, last)
		return false
	}
	return true
}

// refused is nil when err is the API server's refusal containing want.
func refused(err error, want string) error {
	switch {
	case err == nil:
		return errors.New("accepted, want refused")
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		return fmt.Errorf("want a refusal, got %w", err)
	case !strings.Contains(err.Error(), want):
		return fmt.Errorf("refused without %q: %w", want, err)
	}
	return nil
}

// TestLeaseRightsByName: the controller's service account may create
// Leases in vacate-system only (RBAC cannot limit create by name), and get
// and update only the Lease vacate-controller there: another Lease in the
// same namespace, or its own name in another namespace, is refused.
func TestLeaseRightsByName(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ctx := testenv.Context(t)
	sa := clientset(t, asServiceAccount(c)).CoordinationV1()
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("rbac-test")}}
	}
	// Its own Lease: created, read and renewed, as leader election does.
	testutil.Eventually(t, patience, "the service account creating its Lease", func() error {
		_, err := sa.Leases(namespace).Create(ctx, lease(namespace, "vacate-controller"), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	own, err := sa.Leases(namespace).Get(ctx, "vacate-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading its own Lease: %v", err)
	}
	own.Spec.HolderIdentity = ptr.To("rbac-test-2")
	if _, err := sa.Leases(namespace).Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("renewing its own Lease: %v", err)
	}

	// Another Lease, made by an admin in the same namespace and in
	// kube-system: neither read nor written.
	admin := c.Client.CoordinationV1()
	for _, l := range []*coordinationv1.Lease{lease(namespace, "someone-else"), lease("kube-system", "vacate-controller")} {
		if _, err := admin.Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := sa.Leases(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the service account reading Lease %s/%s: %v, want forbidden", l.Namespace, l.Name, err)
		}
		got, err := admin.Leases(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Spec.HolderIdentity = ptr.To("hijacked")
		if _, err := sa.Leases(l.Namespace).Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the service account taking Lease %s/%s: %v, want forbidden", l.Namespace, l.Name, err)
		}
	}
	// Create is limited by namespace.
	if _, err := sa.Leases("default").Create(ctx, lease("default", "vacate-controller"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the service account creating a Lease in namespace default: %v, want forbidden", err)
	}
}

// TestForceDeleteNeedsItsBinding: installed without --force-delete, the
// controller's service account may not delete a pod (refused by the API
// server); a DrainPolicy with onTimeout: ForceDelete says so in its status
// (ForceDeletePermitted=False), and a drain that times out under it fails
// with ForceDeleteForbidden instead of retrying for ever. Once the binding
// is applied ('vacate manifests force-delete'), the policy reports the right.
func TestForceDeleteNeedsItsBinding(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-force", Count: 1, Labels: map[string]string{"rbac-test": "force"}})
	ns := testenv.Namespace(t, c)
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	// An unmanaged pod: blocked by the policy, deleted only by force.
	pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, testutil.Pod("lonely").Namespace(ns).OnNode(nodes[0]).Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa := clientset(t, asServiceAccount(c))
	err = sa.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the service account deleting pod %s/%s without the force-delete binding: %v, want forbidden", ns, pod.Name, err)
	}

	startController(t, c)
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rbac-force"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rbac-test": "force"}},
		Timeouts:     v1alpha1.Timeouts{Drain: &metav1.Duration{Duration: 10 * time.Second}, OnTimeout: "ForceDelete"},
	}}
	if err := cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), dp) })
	permitted := func(want metav1.ConditionStatus, reason string) {
		t.Helper()
		testutil.Eventually(t, patience, "DrainPolicy ForceDeletePermitted="+string(want), func() error {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(dp), dp); err != nil {
				return err
			}
			got := meta.FindStatusCondition(dp.Status.Conditions, "ForceDeletePermitted")
			if got == nil || got.Status != want || got.Reason != reason {
				return fmt.Errorf("conditions %+v", dp.Status.Conditions)
			}
			return nil
		})
	}
	permitted(metav1.ConditionFalse, "MissingForceDeleteRole")

	// The drain times out, cannot delete the pod, and says why.
	if err := requests.Apply(ctx, cl, nodes[0], v1alpha1.Requester{Name: "rbac-test"}, v1alpha1.ModeMaintenance, dp.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: nodes[0]}})
	})
	describe := func(nd *v1alpha1.NodeDrain) string {
		return fmt.Sprintf("phase %s, conditions %+v", nd.Status.Phase, nd.Status.Conditions)
	}
	nd := testenv.WaitForDrain(t, cl, nodes[0], "Failed with ForceDeleteForbidden", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return nd.Status.Phase == v1alpha1.PhaseFailed && b != nil && b.Reason == "ForceDeleteForbidden"
	}, describe)
	if b := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked); !strings.Contains(b.Message, "vacate-controller-force-delete") {
		t.Errorf("the Blocked message does not name the role to bind: %s", b.Message)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("pod %s: %v, want it left in place", pod.Name, err)
	}

	// With the binding, the right is there and the policy says so.
	code, out := vacate(t, c.Kubeconfig, "manifests", "force-delete")
	if code != 0 {
		t.Fatalf("vacate manifests force-delete: exit %d", code)
	}
	applyYAML(t, cl, out)
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), "vacate-controller-force-delete", metav1.DeleteOptions{})
	})
	testutil.Eventually(t, patience, "the service account deleting a pod with the binding", func() error {
		return sa.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})
	dp.Spec.Timeouts.Drain = &metav1.Duration{Duration: 11 * time.Second} // a new generation: reconciled at once
	if err := cl.Update(ctx, dp); err != nil {
		t.Fatal(err)
	}
	permitted(metav1.ConditionTrue, "Permitted")
}

// nodePatch is one change the controller's service account tries on a
// node, as a JSON merge patch (or a JSON patch when json is set).
type nodePatch struct {
	what  string
	patch string
	json  bool
	// refusal is the policy's message; "" means the change is allowed.
	refusal string
}

// TestControllerChangesOnlyItsOwnOnNodes: the ValidatingAdmissionPolicy
// vacate-controller-nodes lets the controller's service account cordon a
// node and change vacate's own annotations, taint and finalizer, and
// refuses any other change with its message; the controller, run as the
// service account, still drains and restores a node.
func TestControllerChangesOnlyItsOwnOnNodes(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-node", Count: 1})[0]
	sa := clientset(t, asServiceAccount(c)).CoreV1().Nodes()
	try := func(p nodePatch) error {
		pt := types.MergePatchType
		if p.json {
			pt = types.JSONPatchType
		}
		_, err := sa.Patch(ctx, node, pt, []byte(p.patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if p.refusal == "" {
			return err
		}
		return refused(err, p.refusal)
	}
	const (
		labels      = "vacate-controller may not change a Node's labels"
		annotations = "vacate-controller may change only its own annotations (vacate.dev/...) on a Node"
		taints      = "vacate-controller may add or change only its taint vacate.dev/draining, with effect NoSchedule, on a Node"
		finalizers  = "vacate-controller may change only its own finalizer (vacate.dev/drain) on a Node"
		spec        = "vacate-controller may change only spec.unschedulable and its own taint in a Node's spec"
	)
	// The policy takes effect when the API server has loaded it.
	check(t, "the policy refusing a label change", func() error {
		return try(nodePatch{patch: `{"metadata":{"labels":{"rbac-test":"x"}}}`, refusal: labels})
	})
	for _, p := range []nodePatch{
		{what: "remove a label", patch: `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`, refusal: labels},
		{what: "add another annotation", patch: `{"metadata":{"annotations":{"example.com/owner":"x"}}}`, refusal: annotations},
		{what: "remove another annotation", patch: `{"metadata":{"annotations":{"kwok.x-k8s.io/node":null}}}`, refusal: annotations},
		{what: "add another taint", patch: `[{"op":"add","path":"/spec/taints","value":[{"key":"example.com/t","effect":"NoSchedule"}]}]`, json: true, refusal: taints},
		{what: "add another finalizer", patch: `{"metadata":{"finalizers":["example.com/keep"]}}`, refusal: finalizers},
		{what: "set spec.podCIDR", patch: `{"spec":{"podCIDR":"10.99.0.0/24","podCIDRs":["10.99.0.0/24"]}}`, refusal: spec},
		{what: "set spec.providerID", patch: `{"spec":{"providerID":"fake://rbac"}}`, refusal: spec},
		{what: "cordon with its annotation", patch: `{"spec":{"unschedulable":true},"metadata":{"annotations":{"vacate.dev/cordoned-by":"x/y"}}}`},
		{what: "add its finalizer", patch: `{"metadata":{"finalizers":["vacate.dev/drain"]}}`},
	} {
		if err := try(p); err != nil {
			t.Errorf("%s: %v", p.what, err)
		}
	}
	// Adding its taint keeps the node's others: the node lifecycle
	// controller adds and removes its not-ready taint on its own schedule,
	// and a patch that replaced the list would remove it, which the policy
	// rightly refuses. The patch tests the resourceVersion it was built
	// from, and is rebuilt when the node changed in between.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		taints, err := json.Marshal(append(n.Spec.Taints, corev1.Taint{Key: "vacate.dev/draining", Value: "rbac-test", Effect: corev1.TaintEffectNoSchedule}))
		if err != nil {
			return false, err
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/resourceVersion","value":%q},{"op":"add","path":"/spec/taints","value":%s}]`, n.ResourceVersion, taints)
		err = try(nodePatch{patch: patch, json: true})
		if apierrors.IsInvalid(err) {
			// The node changed since it was read: the test operation
			// failed (422, "the server rejected our request due to an
			// error in our request"). The policy refuses with 403.
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Errorf("add its taint: %v", err)
	}

	// The controller, as the service account, drains and restores a node.
	startController(t, c)
	if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: "rbac-test"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	describe := func(nd *v1alpha1.NodeDrain) string {
		return fmt.Sprintf("phase %s, conditions %+v", nd.Status.Phase, nd.Status.Conditions)
	}
	testenv.WaitForDrain(t, cl, node, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained }, describe)
	if n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("node %s not cordoned by the drain (%v)", node, err)
	}
	if err := cl.Delete(ctx, &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, patience, "the drain restoring the node", func() error {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			return err
		case n.Spec.Unschedulable || n.Annotations["vacate.dev/cordoned-by"] != "":
			return fmt.Errorf("node still cordoned: unschedulable %t, annotations %v", n.Spec.Unschedulable, n.Annotations)
		}
		return nil
	})

	// Its trigger writes a requester of its own (taint) on a NodeDrain: the
	// verb manage lets it past the policy that keeps people to their own.
	taint := `[{"op":"add","path":"/spec/taints","value":[{"key":"vacate.dev/drain","effect":"NoSchedule"}]}]`
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitForDrain(t, cl, node, "requested by the taint trigger", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return requests.Index(nd, "taint") >= 0
	}, describe)
	untaint := `[{"op":"remove","path":"/spec/taints"}]`
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType, []byte(untaint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, patience, "the trigger withdrawing its drain", func() error {
		err := cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("NodeDrain %s still there (%v)", node, err)
	})
}

// bindUser binds the ClusterRole role to user, and returns a kubeconfig for
// them once RBAC lets them list NodeDrains.
func bindUser(t *testing.T, c *devcluster.Cluster, user, role string) string {
	t.Helper()
	ctx := testenv.Context(t)
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-" + user + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	})
	kc, err := c.KubeconfigFor(user)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestUsersKeepToTheirOwn: with the admission policies installed, a person
// bound to vacate-user drains and cancels with the CLI as before, but may
// not name a DrainPolicy without the verb use on it, nor withdraw another
// person's requester or delete their drain, nor set anything on an
// Evacuation but a release in their own name.
func TestUsersKeepToTheirOwn(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	serveController(t, c)
	// The policy selects the node: a person may name only such a policy
	// (TestNamedPolicyMustSelectTheNode).
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-user", Count: 1, Labels: map[string]string{"rbac-test": "special"}})[0]
	special := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "rbac-special"},
		Spec: v1alpha1.DrainPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rbac-test": "special"}}}}
	if err := cl.Create(ctx, special); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), special) })
	ursula := bindUser(t, c, "ursula", "vacate-user")
	victor := bindUser(t, c, "victor", "vacate-user")
	testutil.Eventually(t, patience, "vacate-user taking effect", func() error {
		for _, kc := range []string{ursula, victor} {
			if code, _ := vacate(t, kc, "status"); code != 0 {
				return errors.New("vacate status refused")
			}
		}
		return nil
	})

	// A policy by name needs the verb use on it.
	check(t, "the policy refusing --policy", func() error {
		code, out := vacate(t, ursula, "drain", node, "--policy", special.Name)
		switch {
		case code == 0 || !strings.Contains(out, "may not use DrainPolicy "+special.Name):
			return fmt.Errorf("exit %d: %s", code, out)
		case strings.Contains(out, "bind the ClusterRole vacate-user"):
			return fmt.Errorf("the CLI tells ursula, who has vacate-user, to get it bound: %s", out)
		}
		return nil
	})
	if code, _ := vacate(t, ursula, "drain", node); code != 0 {
		t.Errorf("ursula's drain without --policy: exit %d", code)
	}

	// victor joins ursula's drain and leaves it: his own requester only.
	if code, _ := vacate(t, victor, "drain", node); code != 0 {
		t.Errorf("victor joining ursula's drain: exit %d", code)
	}
	if code, _ := vacate(t, victor, "cancel", node); code != 0 {
		t.Errorf("victor withdrawing his own requester: exit %d", code)
	}

	// victor may not take ursula's requester away, by cancel or delete.
	const notTheirs = "may add, change or remove only their own requester (cli:victor)"
	if code, out := vacate(t, victor, "cancel", node, "--requester", "cli:ursula"); code == 0 || !strings.Contains(out, notTheirs) {
		t.Errorf("victor withdrawing ursula's requester: exit %d, want refused with %q", code, notTheirs)
	}
	victorClient := userClient(t, c, "victor")
	err := victorClient.Delete(ctx, &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	if err := refused(err, notTheirs); err != nil {
		t.Errorf("victor deleting ursula's drain: %v", err)
	}
	if code, _ := vacate(t, ursula, "cancel", node); code != 0 {
		t.Errorf("ursula's cancel: exit %d", code)
	}

	// With use granted on the policy, ursula names it.
	use := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-use-special"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"vacate.dev"}, Resources: []string{"drainpolicies"}, ResourceNames: []string{special.Name}, Verbs: []string{"use"}}}}
	if err := cl.Create(ctx, use); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), use) })
	bindUser(t, c, "ursula", use.Name)
	testutil.Eventually(t, patience, "ursula naming the policy she may use", func() error {
		if code, out := vacate(t, ursula, "drain", node, "--policy", special.Name); code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	if code, _ := vacate(t, ursula, "cancel", node); code != 0 {
		t.Fatalf("ursula's cancel: exit %d", code)
	}

	// An Evacuation: only a release, in one's own name.
	ev := &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-evacuation"}, Spec: v1alpha1.EvacuationSpec{
		NodeName: "rbac-nowhere", Provider: "rbac-nobody", Mode: v1alpha1.ModeMaintenance, Desired: v1alpha1.DesiredEvacuate, DrainUID: "rbac-uid"}}
	if err := cl.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ev) })
	ursulaClient := userClient(t, c, "ursula")
	release := func(by string) string {
		return fmt.Sprintf(`{"spec":{"release":{"by":%q,"reason":"test","time":%q}}}`, by, time.Now().UTC().Format(time.RFC3339))
	}
	for _, p := range []struct{ what, patch, refusal string }{
		{"a release in victor's name", release("victor"), "spec.release.by must be the releasing user, ursula"},
		{"spec.desired", `{"spec":{"desired":"Cancel"}}`, "only spec.release may be set on an Evacuation"},
		{"a label", `{"metadata":{"labels":{"x":"y"}}}`, "only spec.release may be set on an Evacuation"},
	} {
		err := ursulaClient.Patch(ctx, ev.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p.patch)), client.DryRunAll)
		if err := refused(err, p.refusal); err != nil {
			t.Errorf("ursula setting %s: %v", p.what, err)
		}
	}
	if err := ursulaClient.Patch(ctx, ev.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(release("ursula"))), client.DryRunAll); err != nil {
		t.Errorf("ursula releasing in her own name: %v", err)
	}
}

// userClient is a client that authenticates as user.
func userClient(t *testing.T, c *devcluster.Cluster, user string) client.Client {
	t.Helper()
	return testenv.ClientAs(t, c, user)
}

// TestControllerChangesOnlyItsOwnConditionOnPods: the
// ValidatingAdmissionPolicy vacate-controller-pods lets the controller's
// service account, which may patch pods/status, change only its own
// condition vacate.dev/serving: no other status field, and none of the
// metadata that pods/status can write (labels, annotations, finalizers,
// generateName); and the controller, as that service
// account with the installed RBAC, makes a gated pod Ready.
func TestControllerChangesOnlyItsOwnConditionOnPods(t *testing.T) {
	c := testenv.Start(t)
	install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rbac-pod", Count: 1})[0]
	ns := testenv.Namespace(t, c)
	pod := devcluster.BarePod(ns, "gated", node)
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.ConditionServing}}
	pod.Labels[v1alpha1.LabelEndpointAware] = "true" // declared by hand: labelled too
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := clientset(t, asServiceAccount(c)).CoreV1().Pods(ns)
	try := func(patch, refusal string) error {
		_, err := sa.Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		if refusal == "" {
			return err
		}
		return refused(err, refusal)
	}
	const (
		conditions = "vacate-controller may change only its own condition (vacate.dev/serving) in a Pod's status"
		metadata   = "vacate-controller may not change a Pod's metadata (labels, annotations, finalizers, generateName) through pods/status"
	)
	check(t, "the policy refusing another condition", func() error {
		return try(`{"status":{"conditions":[{"type":"example.com/first","status":"True"}]}}`, conditions)
	})
	for _, p := range []struct{ what, patch, refusal string }{
		{"set another condition", `{"status":{"conditions":[{"type":"example.com/lb","status":"True"}]}}`, conditions},
		{"change the phase", `{"status":{"phase":"Failed"}}`, conditions},
		{"mark it not Ready", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Evil"}]}}`, conditions},
		{"set the status message", `{"status":{"message":"evicted by someone"}}`, conditions},
		{"set the start time", `{"status":{"startTime":"2001-01-01T00:00:00Z"}}`, conditions},
		{"add a label", `{"metadata":{"labels":{"rbac-test":"x"}}}`, metadata},
		{"add an annotation", `{"metadata":{"annotations":{"rbac-test":"x"}}}`, metadata},
		// pods/status keeps the spec, owner references and deletion
		// timestamp (the pod status strategy), but not the rest of the
		// metadata: a finalizer would keep a pod from ever going.
		{"add a finalizer", `{"metadata":{"finalizers":["example.com/keep"]}}`, metadata},
		{"set generateName", `{"metadata":{"generateName":"evil-"}}`, metadata},
		{"set its condition", `{"status":{"conditions":[{"type":"vacate.dev/serving","status":"False","reason":"Draining"}]}}`, ""},
	} {
		if err := try(p.patch, p.refusal); err != nil {
			t.Errorf("%s: %v", p.what, err)
		}
	}

	t.Log("the controller, as the service account, lets the gated pod serve")
	startController(t, c)
	testutil.Eventually(t, patience, "the gated pod Ready", func() error {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !devcluster.PodReady(p) {
			return fmt.Errorf("pod not Ready; conditions %+v", p.Status.Conditions)
		}
		return nil
	})
}
