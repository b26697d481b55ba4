package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/admission"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestKubectlDrainFlags: kubectl drain's flags on vacate drain, against the
// dev cluster and its controller. A node holds a Deployment's pod with
// emptyDir data (app=cache) and one without (app=web): the plan under
// --dry-run=client with --delete-emptydir-data shows the override and
// moves the cache pod (blocked without it) and writes nothing;
// --dry-run=server asks the API server and stores nothing; the drain with
// --delete-emptydir-data --pod-selector app=cache moves the cache pod only
// and is Drained with the web pod left. --timeout gives up a drain a PDB
// holds: the request is withdrawn and the node restored. --disable-eviction
// and bad values are refused in one line; a person without the verbs is
// refused, told which verb and which policy field.
func TestKubectlDrainFlags(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ctx := testenv.Context(t)
	alice := user{t: t, kubeconfig: c.Kubeconfig}
	ns, node := cacheAndWeb(t, c, cl)
	checkRefusedFlags(t, alice, node)

	// --dry-run=client: the plan with the flags, nothing written.
	cacheLine := regexp.MustCompile(`(?m)^\s+` + ns + `/cache-\S+\s+(Block|Evict)\b.*LocalStorage`)
	out := alice.must(ExitOK, "drain", node, "--ignore-daemonsets", "--dry-run=client")
	if m := cacheLine.FindStringSubmatch(out); m == nil || m[1] != "Block" {
		t.Errorf("the plan without --delete-emptydir-data does not block the cache pod:\n%s", out)
	}
	out = alice.must(ExitOK, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--dry-run=client")
	if m := cacheLine.FindStringSubmatch(out); m == nil || m[1] != "Evict" || !strings.Contains(out, "override: pods with emptyDir data are evicted: --delete-emptydir-data of cli:") {
		t.Errorf("the plan with --delete-emptydir-data does not evict the cache pod, saying why:\n%s", out)
	}
	mustNotExist(t, cl, node, "--dry-run=client")
	out = alice.must(ExitOK, "drain", node, "--delete-emptydir-data", "--dry-run=server")
	if !strings.Contains(out, "(server dry run)") {
		t.Errorf("--dry-run=server printed %q", out)
	}
	mustNotExist(t, cl, node, "--dry-run=server")

	// A person with vacate-user only: refused by the admission policy,
	// told the verb and the policy field (a server dry run: nothing stored
	// either way).
	applyUsersAdmission(t, cl)
	bindUserRole(t, c, "kubectl-habit")
	bob := newUser(t, c, "kubectl-habit")
	var code int
	var errOut string
	testutil.Eventually(t, time.Minute, "the admission policy refusing bob's --force", func() error {
		if code, _, errOut = bob.vacate("drain", node, "--force", "--dry-run=server"); code == ExitOK {
			return fmt.Errorf("accepted")
		}
		return nil
	})
	oneError(t, code, errOut, ExitError, "may not override the pod rules with --force",
		"verb delete-unmanaged on drainpolicies", "pods.unmanaged: Delete")

	// The drain: the cache pod leaves, the web pod is not selected.
	alice.must(ExitOK, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector", "app=cache", "--grace-period", "7", "--wait", "--timeout", "2m")
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	if o := nd.Spec.Requesters[0].Overrides; o == nil || !o.DeleteEmptyDirData || o.PodSelector != "app=cache" || o.GracePeriodSeconds == nil || *o.GracePeriodSeconds != 7 {
		t.Errorf("the requester's overrides: %+v", o)
	}
	left := map[string]bool{}
	for _, p := range testenv.PodsOnNode(t, c, node) {
		if p.Namespace == ns && p.DeletionTimestamp == nil {
			left[p.Labels[devcluster.AppLabel]] = true
		}
	}
	if left["cache"] || !left["web"] {
		t.Errorf("after the drain, apps left on %s: %v; want web only", node, left)
	}
	// cancel's dry runs change nothing.
	if out := alice.must(ExitOK, "cancel", node, "--dry-run"); !strings.Contains(out, "would be withdrawn; it is the last: the node would be restored (dry run)") {
		t.Errorf("cancel --dry-run:\n%s", out)
	}
	if out := alice.must(ExitOK, "cancel", node, "--dry-run=server"); !strings.Contains(out, "(server dry run: nothing was changed)") {
		t.Errorf("cancel --dry-run=server:\n%s", out)
	}
	if err := cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{}); err != nil {
		t.Errorf("after cancel's dry runs, the drain: %v", err)
	}
	alice.must(ExitOK, "cancel", node)

	checkTimeoutGivesUp(t, c, cl, alice, ns, node)
}

// cacheAndWeb runs, on the first of two new nodes of pool cli-kubectl, a
// Deployment's pod with emptyDir data (app=cache) and one without
// (app=web), in a new namespace; it returns the namespace and the node.
func cacheAndWeb(t *testing.T, c *devcluster.Cluster, cl client.Client) (string, string) {
	t.Helper()
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-kubectl", Count: 2, Labels: map[string]string{"pool": "cli-kubectl"}})
	ns := testenv.Namespace(t, c)
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Both pods on nodes[0] (nodes[1] is cordoned meanwhile), the cache
	// with emptyDir data.
	cordon(t, c, nodes[1], true)
	cache := devcluster.Deployment(ns, "cache", 1)
	cache.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "cli-kubectl"}
	cache.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	web := devcluster.Deployment(ns, "web", 1)
	web.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "cli-kubectl"}
	for _, d := range []client.Object{cache, web} {
		if err := cl.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), 2, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	cordon(t, c, nodes[1], false)
	return ns, nodes[0]
}

// checkRefusedFlags: kubectl drain's flags vacate refuses, and bad values,
// are refused in one line before anything is asked.
func checkRefusedFlags(t *testing.T, u user, node string) {
	t.Helper()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"drain", node, "--disable-eviction"}, "--disable-eviction is refused: vacate moves pods only through the Eviction API"},
		{[]string{"drain", node, "--grace-period", "0"}, "--grace-period 0: must be 1 or more"},
		{[]string{"drain", node, "--pod-selector", "app in ("}, `--pod-selector "app in ("`},
		{[]string{"drain", node, "--dry-run=later"}, `invalid argument "later" for "--dry-run" flag: must be none, client, server`},
		{[]string{"drain", node, "--timeout", "1m", "--wait-timeout", "1m"}, "choose one"},
	} {
		code, _, errOut := u.vacate(tc.args...)
		oneError(t, code, errOut, ExitUsage, tc.want)
	}
}

// checkTimeoutGivesUp: --timeout gives up a drain that a PDB allowing
// nothing holds (on app=web in ns): the request is withdrawn, and the
// node comes back.
func checkTimeoutGivesUp(t *testing.T, c *devcluster.Cluster, cl client.Client, u user, ns, node string) {
	t.Helper()
	ctx := testenv.Context(t)
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "", "0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "web", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := u.vacate("drain", node, "--timeout", "5s")
	oneError(t, code, errOut, ExitTimeout, "gave up after 5s (--timeout, as kubectl drain): withdrew the request of cli:", "--wait-timeout")
	testutil.Eventually(t, time.Minute, "the drain withdrawn and the node restored", func() error {
		err := cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("NodeDrain %s: %v", node, err)
		}
		if getNode(t, c, node).Spec.Unschedulable {
			return fmt.Errorf("node %s still cordoned", node)
		}
		return nil
	})
}

// applyUsersAdmission applies the admission policies of people's rights on
// NodeDrains and Evacuations (config/admission/users.yaml) until the test
// ends.
func applyUsersAdmission(t *testing.T, cl client.Client) {
	t.Helper()
	for _, obj := range testenv.Objects(t, admission.UsersYAML) {
		if err := cl.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("cli-test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), obj) })
	}
}

// cordon sets a node's unschedulable.
func cordon(t *testing.T, c *devcluster.Cluster, node string, on bool) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on))
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// mustNotExist fails unless the node has no NodeDrain.
func mustNotExist(t *testing.T, cl client.Client, node, after string) {
	t.Helper()
	if err := cl.Get(context.Background(), types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{}); !apierrors.IsNotFound(err) {
		t.Errorf("after %s, NodeDrain %s: %v (want none)", after, node, err)
	}
}
