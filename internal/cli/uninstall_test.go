package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
)

const foreignFinalizer = "example.com/keep"

// TestUninstallGivesEveryNodeBack: with vacate installed as 'manifests
// install' renders it, a DrainPolicy default that puts vacate.dev/drain on
// every node (onNodeDelete: Drain), a Drained node and a controller that
// runs outside the Deployment:
//   - uninstall without --cancel-drains refuses in one line and writes
//     nothing (the audit log);
//   - --dry-run says what it would do and writes nothing;
//   - uninstall --cancel-drains restores the node through the controller,
//     deletes the Deployment and waits for its pods, waits for the other
//     controller to let go of its Lease before it touches a node, removes
//     vacate.dev/drain from every node and keeps a foreign finalizer, and
//     deletes the policies, RBAC objects, namespace and CRDs;
//   - a second uninstall succeeds and finds nothing to do.
func TestUninstallGivesEveryNodeBack(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	reinstallCRDsAfter(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-uninstall", Count: 2})
	t.Cleanup(func() { stripFinalizers(t, c, nodes) }) // before the nodes are deleted
	installed := install(t, c, cl)
	ctrl := runControllerUntilAsked(t, c)
	alice := user{t: t, kubeconfig: c.Kubeconfig}
	uninstaller := newUser(t, c, "uninstaller", "system:masters")

	holdEveryNode(t, c, cl, nodes)
	addFinalizer(t, c, nodes[1], foreignFinalizer)
	bindCarol(t, cl)

	alice.must(ExitOK, "drain", nodes[0], "--wait", "--timeout", "2m")
	if n := getNode(t, c, nodes[0]); !n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] == "" {
		t.Fatalf("the drain did not cordon %s", nodes[0])
	}
	before := clusterState(t, c, cl, nodes, installed)

	// 1. Refused while a drain holds a node, and nothing written.
	start := time.Now()
	code, _, errOut := uninstaller.vacate("uninstall")
	oneError(t, code, errOut, ExitError, "1 drain(s) in place: "+nodes[0]+" (Drained, for "+admin+")",
		"finished or not, must be cancelled", "run 'vacate uninstall --cancel-drains'")
	// 2. The dry run says what it would do, and writes nothing either.
	out := uninstaller.must(ExitOK, "uninstall", "--cancel-drains", "--dry-run")
	checkDryRun(t, out, dryRunLines(nodes[0]), func() []devcluster.AuditEvent { return mutations(t, c, "uninstaller", start) },
		before, func() string { return clusterState(t, c, cl, nodes, installed) })
	held := nodesWith(t, c, v1alpha1.FinalizerDrain)

	// 3. The uninstall. The controller outside the Deployment stops when
	// uninstall says it waits for it, as a person would stop it.
	start = time.Now()
	out = uninstaller.mustWhile(ExitOK, map[string]func(){"waiting until it stops": ctrl.stop}, "uninstall", "--cancel-drains")
	for _, want := range uninstallLines(nodes[0], len(held)) {
		if !want.MatchString(out) {
			t.Errorf("uninstall output lacks %s", want)
		}
	}
	if n := getNode(t, c, nodes[0]); n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] != "" {
		t.Errorf("%s after uninstall: unschedulable=%t annotations=%v; want restored", n.Name, n.Spec.Unschedulable, n.Annotations)
	}
	if left := nodesWith(t, c, v1alpha1.FinalizerDrain); len(left) > 0 {
		t.Errorf("nodes still holding %s: %v", v1alpha1.FinalizerDrain, left)
	}
	if !slices.Contains(getNode(t, c, nodes[1]).Finalizers, foreignFinalizer) {
		t.Errorf("uninstall dropped the foreign finalizer %s from %s", foreignFinalizer, nodes[1])
	}
	// The finalizers were removed only once the controller had stopped (it
	// would have added them again).
	stopped := ctrl.stoppedAt()
	for _, e := range mutations(t, c, "uninstaller", start) {
		if e.ObjectRef != nil && e.ObjectRef.Resource == "nodes" && e.Received.Before(stopped.Truncate(time.Microsecond)) {
			t.Errorf("uninstall patched node %s at %s, before the controller stopped at %s", e.ObjectRef.Name, e.Received, stopped)
		}
	}
	for _, o := range installed {
		if exists, deleting := present(t, cl, o); exists && !deleting {
			t.Errorf("%s %s is still there", o.GetKind(), o.GetName())
		}
	}
	pods, err := c.Client.CoreV1().Pods("vacate-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=vacate-controller"})
	if err != nil || len(pods.Items) > 0 {
		t.Errorf("controller pods after uninstall: %v (%v)", len(pods.Items), err)
	}

	// 4. Again: nothing left to do, and it says so.
	out = uninstaller.must(ExitOK, "uninstall", "--cancel-drains")
	for _, want := range []string{
		"controller: no Deployment vacate-system/vacate-controller installed; nothing to delete",
		"node finalizers: none of ",
		"vacate is uninstalled from the cluster at ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("a second uninstall's output lacks %q", want)
		}
	}
}

// installedRest is how uninstall lists the objects of the install manifests
// other than the CRDs and the controller, last created first, and those
// not there.
const installedRest = "ValidatingWebhookConfiguration vacate-nodedrain-policy, MutatingWebhookConfiguration vacate-endpoint-aware, Service vacate-system/vacate-controller-metrics, Service vacate-system/vacate-webhook, Secret vacate-system/vacate-webhook-cert, RoleBinding vacate-system/vacate-controller, ClusterRoleBinding vacate-controller, ServiceAccount vacate-system/vacate-controller, ValidatingAdmissionPolicyBinding vacate-eviction-requests, ValidatingAdmissionPolicy vacate-eviction-requests, ValidatingAdmissionPolicyBinding vacate-evacuation-status, ValidatingAdmissionPolicy vacate-evacuation-status, ValidatingAdmissionPolicyBinding vacate-evacuations, ValidatingAdmissionPolicy vacate-evacuations, ValidatingAdmissionPolicyBinding vacate-nodedrains, ValidatingAdmissionPolicy vacate-nodedrains, ValidatingAdmissionPolicyBinding vacate-controller-nodedrain-webhook, ValidatingAdmissionPolicy vacate-controller-nodedrain-webhook, ValidatingAdmissionPolicyBinding vacate-controller-webhook, ValidatingAdmissionPolicy vacate-controller-webhook, ValidatingAdmissionPolicyBinding vacate-controller-tokens, ValidatingAdmissionPolicy vacate-controller-tokens, ValidatingAdmissionPolicyBinding vacate-surge-replacements, ValidatingAdmissionPolicy vacate-surge-replacements, ValidatingAdmissionPolicyBinding vacate-controller-surge, ValidatingAdmissionPolicy vacate-controller-surge, ValidatingAdmissionPolicyBinding vacate-controller-pods, ValidatingAdmissionPolicy vacate-controller-pods, ValidatingAdmissionPolicyBinding vacate-controller-nodes, ValidatingAdmissionPolicy vacate-controller-nodes, ClusterRole vacate-user, ClusterRole vacate-controller-surge, ClusterRole vacate-controller-force-delete, Role vacate-system/vacate-controller, ClusterRole vacate-controller, Namespace vacate-system; 8 not there"

// dryRunLines are the lines 'uninstall --cancel-drains --dry-run' prints
// with vacate installed, the Drained node drained, and the binding of
// bindCarol.
func dryRunLines(drained string) []string {
	return []string{
		"drains: would cancel 1: " + drained + " (Drained, for " + admin + "); the controller would restore their nodes",
		"controller: would delete 2: PodDisruptionBudget vacate-system/vacate-controller, Deployment vacate-system/vacate-controller; its ",
		"controller: a vacate-controller holds Lease kube-system/vacate-controller (",
		"node finalizers: would remove vacate.dev/drain from ",
		"drain policies: would delete 1: default",
		"rbac and namespace: would delete 36: " + installedRest,
		"crds: would delete 4: CustomResourceDefinition nodedrains.vacate.dev, CustomResourceDefinition evacuations.vacate.dev, " +
			"CustomResourceDefinition evacuationproviders.vacate.dev, CustomResourceDefinition drainpolicies.vacate.dev",
		"note: ClusterRoleBinding(s) not made by 'vacate manifests install' still bind vacate's roles: uninstall-test-carol (to vacate-user)",
		"dry run: nothing was changed in the cluster at ",
	}
}

// uninstallLines match the lines 'uninstall --cancel-drains' prints with
// vacate installed, the Drained node drained, a controller outside the
// Deployment, held nodes holding vacate.dev/drain, and the binding of
// bindCarol.
func uninstallLines(drained string, held int) []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`(?m)^drains: cancelling 1: ` + drained + ` \(Drained, for ` + admin + `\); waiting for the controller to restore their nodes$`),
		regexp.MustCompile(`(?m)^drains: 1 cancelled and restored: 1 node\(s\) schedulable again$`),
		regexp.MustCompile(`(?m)^controller: deleted 2: PodDisruptionBudget vacate-system/vacate-controller, Deployment vacate-system/vacate-controller; waiting for its \d+ pod\(s\) to stop$`),
		regexp.MustCompile(`(?m)^controller: a vacate-controller still holds Lease kube-system/vacate-controller \(\S+\); waiting until it stops$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^node finalizers: removed vacate.dev/drain from %d of \d+ node\(s\)$`, held)),
		regexp.MustCompile(`(?m)^drain policies: deleted 1: default$`),
		regexp.MustCompile(`(?m)^rbac and namespace: deleted 36: ` + regexp.QuoteMeta(installedRest) + `$`),
		regexp.MustCompile(`(?m)^crds: deleted 4: CustomResourceDefinition nodedrains.vacate.dev, CustomResourceDefinition evacuations.vacate.dev, ` +
			`CustomResourceDefinition evacuationproviders.vacate.dev, CustomResourceDefinition drainpolicies.vacate.dev$`),
		regexp.MustCompile(`(?m)^note: .* uninstall-test-carol \(to vacate-user\); delete them if nobody needs them$`),
		regexp.MustCompile(`(?m)^vacate is uninstalled from the cluster at `),
	}
}

// holdEveryNode creates the DrainPolicy default with onNodeDelete: Drain,
// and waits until it holds every node of nodes with vacate.dev/drain.
func holdEveryNode(t *testing.T, c *devcluster.Cluster, cl client.Client, nodes []string) {
	t.Helper()
	p := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultPolicyName},
		Spec: v1alpha1.DrainPolicySpec{Triggers: v1alpha1.Triggers{OnNodeDelete: "Drain"}}}
	if err := cl.Create(testenv.Context(t), p); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "vacate.dev/drain on every node", testutil.Holds(func() bool {
		for _, n := range nodes {
			if !slices.Contains(getNode(t, c, n).Finalizers, v1alpha1.FinalizerDrain) {
				return false
			}
		}
		return true
	}))
}

// bindCarol makes a binding someone made for a person, until the test
// ends: uninstall names it, and leaves it.
func bindCarol(t *testing.T, cl client.Client) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "uninstall-test-carol"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "vacate-user"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "carol"}},
	}
	if err := cl.Create(testenv.Context(t), binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), binding) })
}

// TestUninstallWithoutControllerStops: a drain that nobody restores (no
// controller runs) stops the uninstall in one line that names it and says
// the controller must run, before anything else is removed.
func TestUninstallWithoutControllerStops(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-uninstall-alone", Count: 1})
	nd := testutil.NodeDrain(nodes[0], "", "cli:dave")
	nd.Finalizers = []string{v1alpha1.FinalizerRestore} // as the controller adds it
	if err := cl.Create(context.Background(), nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := cl.Get(ctx, client.ObjectKeyFromObject(nd), nd); err == nil {
			nd.Finalizers = nil
			_ = cl.Update(ctx, nd)
			_ = cl.Delete(ctx, nd)
		}
	})
	u := user{t: t, kubeconfig: c.Kubeconfig}
	code, out, errOut := u.vacate("uninstall", "--cancel-drains", "--timeout", "2s")
	oneError(t, code, errOut, ExitError, "1 drain(s) still there after 2s: "+nodes[0]+" (being restored, for cli:dave)",
		"the vacate controller must be running to restore their nodes", "nothing else was removed")
	if !strings.Contains(out, "drains: cancelling 1: "+nodes[0]+" (Pending, for cli:dave)") || strings.Contains(out, "controller:") {
		t.Errorf("uninstall went past the drains:\n%s", out)
	}
	if err := cl.List(context.Background(), &v1alpha1.DrainPolicyList{}); err != nil {
		t.Errorf("vacate's API after the stopped uninstall: %v", err)
	}

	// Without the rights, one line that says who may uninstall.
	code, _, errOut = newUser(t, c, "nobody-uninstall").vacate("uninstall")
	oneError(t, code, errOut, ExitError, "permission denied while listing NodeDrains", "uninstalling vacate needs cluster admin rights")
	for _, args := range [][]string{{"uninstall", "now"}, {"uninstall", "--timeout", "-1s"}, {"uninstall", "--keep-crds=maybe"}} {
		code, _, errOut := u.vacate(args...)
		oneError(t, code, errOut, ExitUsage)
	}
}

// install applies what 'vacate manifests install' prints, but the CRDs
// (installed already) and the kinds in skip, and returns those objects.
// The Deployment's pods run nothing: kwok only pretends to run them.
func install(t *testing.T, c *devcluster.Cluster, cl client.Client, skip ...string) []*unstructured.Unstructured {
	t.Helper()
	ctx := testenv.Context(t)
	// Another test may have left namespace vacate-system terminating.
	testutil.Eventually(t, time.Minute, "namespace vacate-system to be gone or active", testutil.Holds(func() bool {
		ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "vacate-system", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && ns.Status.Phase == corev1.NamespaceActive)
	}))
	text := user{t: t, kubeconfig: c.Kubeconfig}.must(ExitOK, "manifests", "install", "--image", "registry.example/vacate-controller:v0.1.0")
	objs, err := decodeManifests(text)
	if err != nil {
		t.Fatal(err)
	}
	var applied []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || slices.Contains(skip, o.GetKind()) {
			continue
		}
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("uninstall-test"), client.ForceOwnership); err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		applied = append(applied, o)
	}
	t.Cleanup(func() {
		for _, o := range slices.Backward(applied) {
			_ = cl.Delete(context.Background(), o)
		}
	})
	return applied
}

// controller is the vacate controller run in process with leader election
// on its default Lease (kube-system/vacate-controller), as 'vacate dev
// controller' runs it: outside the Deployment, where uninstall cannot stop
// it.
type controller struct {
	t    *testing.T
	once sync.Once
	mu   sync.Mutex
	at   time.Time
	halt func() error
}

func runControllerUntilAsked(t *testing.T, c *devcluster.Cluster) *controller {
	t.Helper()
	opts := operator.InProcessOptions()
	opts.LeaderElect = true
	halt, err := operator.Start(context.Background(), c.RESTConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := &controller{t: t, halt: halt}
	t.Cleanup(func() {
		ctrl.stop()
		// The released Lease stays, labelled as a controller's: gone, it
		// tells the later tests' drains no stale story of a controller.
		_ = c.Client.CoordinationV1().Leases(opts.LeaderElectionNamespace).Delete(context.Background(), opts.LeaderElectionID, metav1.DeleteOptions{})
	})
	return ctrl
}

// stop stops the controller (which releases its Lease) and records when.
func (c *controller) stop() {
	c.once.Do(func() {
		if err := c.halt(); err != nil {
			c.t.Errorf("controller exited with %v", err)
		}
		c.mu.Lock()
		c.at = time.Now()
		c.mu.Unlock()
	})
}

func (c *controller) stoppedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		c.t.Fatal("the controller was never stopped")
	}
	return c.at
}

// mustWhile runs the CLI like must, and calls each action once, when the
// output first shows its text.
func (u user) mustWhile(want int, actions map[string]func(), args ...string) string {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := &triggerWriter{actions: actions}
	var errOut bytes.Buffer
	code := Run(ctx, append(args, "--kubeconfig", u.kubeconfig), Streams{In: strings.NewReader(""), Out: out, Err: &errOut}, clock.RealClock{})
	u.t.Logf("$ vacate %s  → exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	if code != want {
		u.t.Fatalf("vacate %s exited %d, want %d\nstderr:\n%s", strings.Join(args, " "), code, want, errOut.String())
	}
	return out.String()
}

type triggerWriter struct {
	bytes.Buffer
	actions map[string]func()
}

func (w *triggerWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	for text, act := range w.actions {
		if strings.Contains(w.String(), text) {
			delete(w.actions, text)
			act()
		}
	}
	return n, err
}

// clusterState describes what uninstall may change, to compare.
// checkDryRun checks a dry run's output says each of want, and that it
// wrote nothing: no mutating request (writes), the cluster's state as
// before.
func checkDryRun(t *testing.T, out string, want []string, writes func() []devcluster.AuditEvent, before string, state func() string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("dry run output lacks %q", w)
		}
	}
	if w := writes(); len(w) != 0 {
		t.Fatalf("the dry run made %d mutating request(s): %+v", len(w), w)
	}
	if after := state(); after != before {
		t.Fatalf("the dry run changed the cluster:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func clusterState(t *testing.T, c *devcluster.Cluster, cl client.Client, nodes []string, objs []*unstructured.Unstructured) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, name := range nodes {
		n := getNode(t, c, name)
		fmt.Fprintf(&b, "node %s unschedulable=%t cordonedBy=%s finalizers=%v\n", name, n.Spec.Unschedulable, n.Annotations[v1alpha1.AnnotationCordonedBy], n.Finalizers)
	}
	drains := &v1alpha1.NodeDrainList{}
	if err := cl.List(ctx, drains); err != nil {
		t.Fatal(err)
	}
	for _, nd := range drains.Items {
		fmt.Fprintf(&b, "nodedrain %s %s uid=%s deleting=%t\n", nd.Name, nd.Status.Phase, nd.UID, !nd.DeletionTimestamp.IsZero())
	}
	policies := &v1alpha1.DrainPolicyList{}
	if err := cl.List(ctx, policies); err != nil {
		t.Fatal(err)
	}
	for _, p := range policies.Items {
		fmt.Fprintf(&b, "drainpolicy %s uid=%s\n", p.Name, p.UID)
	}
	crds, err := decodeManifests(string(must(crdYAML())))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range append(slices.Clone(objs), crds...) {
		exists, deleting := present(t, cl, o)
		fmt.Fprintf(&b, "%s %s/%s exists=%t deleting=%t\n", o.GetKind(), o.GetNamespace(), o.GetName(), exists, deleting)
	}
	return b.String()
}

func crdYAML() ([]byte, error) {
	docs, err := manifest("crds", "", "", bindings{})
	return []byte(strings.Join(docs, "\n---\n")), err
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// present reports whether an object exists, and whether it is being
// deleted.
func present(t *testing.T, cl client.Client, o *unstructured.Unstructured) (bool, bool) {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	err := cl.Get(context.Background(), client.ObjectKeyFromObject(o), got)
	if apierrors.IsNotFound(err) {
		return false, false
	}
	if err != nil {
		t.Fatalf("reading %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return true, got.GetDeletionTimestamp() != nil
}

func nodesWith(t *testing.T, c *devcluster.Cluster, finalizer string) []string {
	t.Helper()
	list, err := c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		if slices.Contains(n.Finalizers, finalizer) {
			out = append(out, n.Name)
		}
	}
	return out
}

func addFinalizer(t *testing.T, c *devcluster.Cluster, node, finalizer string) {
	t.Helper()
	patch := must(json.Marshal([]map[string]any{{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}}))
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stripFinalizers lets the test's nodes be deleted, whatever the test left.
func stripFinalizers(t *testing.T, c *devcluster.Cluster, nodes []string) {
	for _, n := range nodes {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), n, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing the finalizers of %s: %v", n, err)
		}
	}
}

// reinstallCRDsAfter puts vacate's CRDs back when the test ends, for the
// package's other tests, once uninstall's deletion has finished.
func reinstallCRDsAfter(t *testing.T, c *devcluster.Cluster) {
	t.Cleanup(func() {
		ctx := context.Background()
		crds, err := decodeManifests(string(must(crdYAML())))
		if err != nil {
			t.Error(err)
			return
		}
		cl, err := client.New(c.RESTConfig, client.Options{})
		if err != nil {
			t.Error(err)
			return
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for _, o := range crds {
				if exists, deleting := present(t, cl, o); exists && deleting {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("vacate's CRDs are still being deleted: %v", err)
			return
		}
		if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
			t.Error(err)
		}
	})
}
