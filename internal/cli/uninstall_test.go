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

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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

	// The policy holds every node with vacate.dev/drain.
	p := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultPolicyName},
		Spec: v1alpha1.DrainPolicySpec{Triggers: v1alpha1.Triggers{OnNodeDelete: "Drain"}}}
	if err := cl.Create(ctx, p); err != nil {
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
	addFinalizer(t, c, nodes[1], foreignFinalizer)
	// A binding someone made for a person: uninstall names it, leaves it.
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "uninstall-test-carol"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "vacate-user"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "carol"}},
	}
	if err := cl.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), binding) })

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
	for _, want := range []string{
		"drains: would cancel 1: " + nodes[0] + " (Drained, for " + admin + "); the controller would restore their nodes",
		"controller: would delete 2: PodDisruptionBudget vacate-system/vacate-controller, Deployment vacate-system/vacate-controller; its ",
		"controller: a vacate-controller holds Lease kube-system/vacate-controller (",
		"node finalizers: would remove vacate.dev/drain from ",
		"drain policies: would delete 1: default",
		"rbac and namespace: would delete 34: " +
			"ValidatingWebhookConfiguration vacate-nodedrain-policy, MutatingWebhookConfiguration vacate-endpoint-aware, Service vacate-system/vacate-controller-metrics, Service vacate-system/vacate-webhook, Secret vacate-system/vacate-webhook-cert, RoleBinding vacate-system/vacate-controller, ClusterRoleBinding vacate-controller, ServiceAccount vacate-system/vacate-controller, ValidatingAdmissionPolicyBinding vacate-evacuation-status, ValidatingAdmissionPolicy vacate-evacuation-status, ValidatingAdmissionPolicyBinding vacate-evacuations, ValidatingAdmissionPolicy vacate-evacuations, ValidatingAdmissionPolicyBinding vacate-nodedrains, ValidatingAdmissionPolicy vacate-nodedrains, ValidatingAdmissionPolicyBinding vacate-controller-nodedrain-webhook, ValidatingAdmissionPolicy vacate-controller-nodedrain-webhook, ValidatingAdmissionPolicyBinding vacate-controller-webhook, ValidatingAdmissionPolicy vacate-controller-webhook, ValidatingAdmissionPolicyBinding vacate-controller-tokens, ValidatingAdmissionPolicy vacate-controller-tokens, ValidatingAdmissionPolicyBinding vacate-surge-replacements, ValidatingAdmissionPolicy vacate-surge-replacements, ValidatingAdmissionPolicyBinding vacate-controller-surge, ValidatingAdmissionPolicy vacate-controller-surge, ValidatingAdmissionPolicyBinding vacate-controller-pods, ValidatingAdmissionPolicy vacate-controller-pods, ValidatingAdmissionPolicyBinding vacate-controller-nodes, ValidatingAdmissionPolicy vacate-controller-nodes, ClusterRole vacate-user, ClusterRole vacate-controller-surge, ClusterRole vacate-controller-force-delete, Role vacate-system/vacate-controller, ClusterRole vacate-controller, Namespace vacate-system; 8 not there",
		"crds: would delete 4: CustomResourceDefinition nodedrains.vacate.dev, CustomResourceDefinition evacuations.vacate.dev, " +
			"CustomResourceDefinition evacuationproviders.vacate.dev, CustomResourceDefinition drainpolicies.vacate.dev",
		"note: ClusterRoleBinding(s) not made by 'vacate manifests install' still bind vacate's roles: uninstall-test-carol (to vacate-user)",
		"dry run: nothing was changed in the cluster at ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	if writes := mutations(t, c, "uninstaller", start); len(writes) != 0 {
		t.Fatalf("the refused uninstall and the dry run made %d mutating request(s): %+v", len(writes), writes)
	}
	if after := clusterState(t, c, cl, nodes, installed); after != before {
		t.Fatalf("the cluster changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	held := nodesWith(t, c, v1alpha1.FinalizerDrain)

	// 3. The uninstall. The controller outside the Deployment stops when
	// uninstall says it waits for it, as a person would stop it.
	start = time.Now()
	out = uninstaller.mustWhile(ExitOK, map[string]func(){"waiting until it stops": ctrl.stop}, "uninstall", "--cancel-drains")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^drains: cancelling 1: ` + nodes[0] + ` \(Drained, for ` + admin + `\); waiting for the controller to restore their nodes$`),
		regexp.MustCompile(`(?m)^drains: 1 cancelled and restored: 1 node\(s\) schedulable again$`),
		regexp.MustCompile(`(?m)^controller: deleted 2: PodDisruptionBudget vacate-system/vacate-controller, Deployment vacate-system/vacate-controller; waiting for its \d+ pod\(s\) to stop$`),
		regexp.MustCompile(`(?m)^controller: a vacate-controller still holds Lease kube-system/vacate-controller \(\S+\); waiting until it stops$`),
		regexp.MustCompile(fmt.Sprintf(`(?m)^node finalizers: removed vacate.dev/drain from %d of \d+ node\(s\)$`, len(held))),
		regexp.MustCompile(`(?m)^drain policies: deleted 1: default$`),
		regexp.MustCompile(`(?m)^rbac and namespace: deleted 34: ` + regexp.QuoteMeta("ValidatingWebhookConfiguration vacate-nodedrain-policy, MutatingWebhookConfiguration vacate-endpoint-aware, Service vacate-system/vacate-controller-metrics, Service vacate-system/vacate-webhook, Secret vacate-system/vacate-webhook-cert, RoleBinding vacate-system/vacate-controller, ClusterRoleBinding vacate-controller, ServiceAccount vacate-system/vacate-controller, ValidatingAdmissionPolicyBinding vacate-evacuation-status, ValidatingAdmissionPolicy vacate-evacuation-status, ValidatingAdmissionPolicyBinding vacate-evacuations, ValidatingAdmissionPolicy vacate-evacuations, ValidatingAdmissionPolicyBinding vacate-nodedrains, ValidatingAdmissionPolicy vacate-nodedrains, ValidatingAdmissionPolicyBinding vacate-controller-nodedrain-webhook, ValidatingAdmissionPolicy vacate-controller-nodedrain-webhook, ValidatingAdmissionPolicyBinding vacate-controller-webhook, ValidatingAdmissionPolicy vacate-controller-webhook, ValidatingAdmissionPolicyBinding vacate-controller-tokens, ValidatingAdmissionPolicy vacate-controller-tokens, ValidatingAdmissionPolicyBinding vacate-surge-replacements, ValidatingAdmissionPolicy vacate-surge-replacements, ValidatingAdmissionPolicyBinding vacate-controller-surge, ValidatingAdmissionPolicy vacate-controller-surge, ValidatingAdmissionPolicyBinding vacate-controller-pods, ValidatingAdmissionPolicy vacate-controller-pods, ValidatingAdmissionPolicyBinding vacate-controller-nodes, ValidatingAdmissionPolicy vacate-controller-nodes, ClusterRole vacate-user, ClusterRole vacate-controller-surge, ClusterRole vacate-controller-force-delete, Role vacate-system/vacate-controller, ClusterRole vacate-controller, Namespace vacate-system; 8 not there") + `$`),
		regexp.MustCompile(`(?m)^crds: deleted 4: CustomResourceDefinition nodedrains.vacate.dev, CustomResourceDefinition evacuations.vacate.dev, ` +
			`CustomResourceDefinition evacuationproviders.vacate.dev, CustomResourceDefinition drainpolicies.vacate.dev$`),
		regexp.MustCompile(`(?m)^note: .* uninstall-test-carol \(to vacate-user\); delete them if nobody needs them$`),
		regexp.MustCompile(`(?m)^vacate is uninstalled from the cluster at `),
	} {
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

const (
	// forceProvider is the EvacuationProvider of the stuck state.
	forceProvider = "cli-force-store"
	// providerFinalizer is the fixed name of the EvacuationProvider finalizer.
	providerFinalizer = "vacate.dev/evacuations"
)

// TestUninstallForceWithoutController: vacate is installed but its
// controller is gone, and it left what a controller stopped mid-drain
// leaves (see leaveStuckState).
//   - uninstall --cancel-drains waits --timeout for the controller, as
//     before, then stops in one line that names the drains and says what
//     --force would do; nothing is restored;
//   - --force --dry-run says all it would do and leave, and writes nothing;
//   - --force asks the controller first, then uncordons only the node whose
//     vacate.dev/cordoned-by is <drain>/<uid> of its live drain, in a patch
//     that tests what it read, never touches the nodes whose annotation is
//     a legacy value or a copy, releases the NodeDrains, the provider and
//     the node's finalizers, reports what it left behind and exits 0;
//   - a plain uninstall then deletes the CRDs, which nothing holds.
func TestUninstallForceWithoutController(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	reinstallCRDsAfter(t, c)
	ctx := testenv.Context(t)
	installed := install(t, c, cl, "Deployment", "PodDisruptionBudget") // the controller was deleted
	st := leaveStuckState(t, c, cl)
	n := st.nodes
	uninstaller := newUser(t, c, "uninstaller-force", "system:masters")
	// A controller run outside the Deployment is stuck: it keeps its Lease
	// and does nothing.
	lease := holdLease(t, c, "stuck-controller")

	// 1. Without --force: the old wait, until --timeout, then the hint.
	start := time.Now()
	code, out, errOut := uninstaller.vacate("uninstall", "--cancel-drains", "--timeout", "3s")
	oneError(t, code, errOut, ExitError, "2 drain(s) still there after 3s: "+n[0]+" (being restored, for cli:erin), "+n[1]+" (being restored, for cli:erin)",
		"the vacate controller must be running to restore their nodes", "nothing else was removed",
		"or run 'vacate uninstall --cancel-drains --force' to finish without it: it uncordons only the nodes whose "+
			"vacate.dev/cordoned-by names a drain that exists by name and UID, removes vacate's finalizers and reports what it leaves behind")
	if strings.Contains(out, "controller:") {
		t.Errorf("uninstall went past the drains:\n%s", out)
	}
	for _, name := range n {
		if !getNode(t, c, name).Spec.Unschedulable {
			t.Errorf("node %s was uncordoned without --force", name)
		}
	}
	for _, e := range mutations(t, c, "uninstaller-force", start) {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "nodedrains" || e.Verb != "delete" {
			t.Errorf("uninstall without --force: unexpected write %s %+v", e.Verb, e.ObjectRef)
		}
	}
	before := clusterState(t, c, cl, n, installed) // the drains are cancelled now

	// 2. The dry run says everything, and writes nothing.
	start = time.Now()
	out = uninstaller.must(ExitOK, "uninstall", "--cancel-drains", "--force", "--dry-run", "--timeout", "3s")
	leftLines := []string{
		"  node " + n[1] + " stays cordoned: its vacate.dev/cordoned-by \"" + n[1] + "\" names no drain UID (written before vacate recorded one, or by hand): " +
			"vacate cannot tell it cordoned the node; if nobody else did: kubectl uncordon " + n[1] + " && kubectl annotate node " + n[1] + " vacate.dev/cordoned-by-",
		"  node " + n[2] + " stays cordoned: its vacate.dev/cordoned-by \"" + st.cordonedBy + "\" names the drain of node " + n[0] + ": " +
			"vacate cannot tell it cordoned the node; if nobody else did: kubectl uncordon " + n[2] + " && kubectl annotate node " + n[2] + " vacate.dev/cordoned-by-",
		"  provider " + forceProvider + " may still hold changes for node " + n[0] + " (Evacuation " + st.evacuation + " was InProgress); check the provider",
		"  HTTP hook of pod shop/web-0 on node " + n[0] + " may not have been told to cancel (drain " + n[0] + ", hook was InProgress); check the app",
		"  HTTP hook of pod " + st.ns + "/web-3 on node " + n[0] + " may not have been told to cancel (drain " + n[0] + ", hook was Completed); check the app",
		"  HTTP hook of pod " + st.ns + "/web-4 on node " + n[0] + " may not have been told to cancel (drain " + n[0] + ", hook was called; status.hooks did not list it); check the app",
	}
	for _, want := range append([]string{
		"drains: would cancel 2: " + n[0] + " (being restored, for cli:erin), " + n[1] + " (being restored, for cli:erin); the controller would restore their nodes",
		"controller: no Deployment vacate-system/vacate-controller installed; nothing to delete",
		"nodes: would uncordon 1 that vacate cordoned: " + n[0] + "; would leave 2 cordoned that vacate cannot prove it cordoned: " + n[1] + ", " + n[2],
		"drains: would remove vacate.dev/restore from 2: " + n[0] + ", " + n[1],
		"evacuation providers: would remove vacate.dev/evacuations from 1: " + forceProvider,
		"controller: a vacate-controller holds Lease " + lease + " (stuck-controller); uninstall would wait until it stops, at most --timeout, then go on (--force)",
		"node finalizers: would remove vacate.dev/drain from 1 of ",
		"would leave behind, if the controller does not restore the drains first:\n",
		"dry run: nothing was changed in the cluster at ",
	}, leftLines...) {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	if writes := mutations(t, c, "uninstaller-force", start); len(writes) != 0 {
		t.Errorf("the dry run made %d mutating request(s): %+v", len(writes), writes)
	}
	if after := clusterState(t, c, cl, n, installed); after != before {
		t.Fatalf("the dry run changed the cluster:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// 3. --force finishes, restores only what vacate provably did, and
	// reports the rest.
	start = time.Now()
	out = uninstaller.must(ExitOK, "uninstall", "--cancel-drains", "--force", "--keep-crds", "--timeout", "3s")
	stuck := "a vacate-controller outside the Deployment still holds Lease " + lease + " as stuck-controller after 3s"
	for _, want := range append([]string{
		"controller: " + stuck + "; going on (--force)",
		"drains: cancelling 2: ",
		"drains: 2 still there after 3s: " + n[0] + " (being restored, for cli:erin), " + n[1] + " (being restored, for cli:erin); " +
			"the controller did not restore them: uninstall restores what is safe itself once the controller is stopped (--force)",
		"nodes: uncordoned 1 that vacate cordoned: " + n[0] + "; left 2 cordoned that vacate cannot prove it cordoned: " + n[1] + ", " + n[2] + " (see below)",
		"drains: removed vacate.dev/restore from 2: " + n[0] + ", " + n[1],
		"evacuation providers: removed vacate.dev/evacuations from 1: " + forceProvider,
		"node finalizers: removed vacate.dev/drain from 1 of ",
		"\nleft behind:\n  " + stuck + ": it may add vacate's finalizers again; stop it ('vacate dev controller': Ctrl-C)\n" +
			strings.Join(leftLines, "\n") + "\nvacate is uninstalled from the cluster at ",
	}, "its CRDs and DrainPolicies are kept") {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall --force output lacks %q", want)
		}
	}
	if strings.Contains(out, "web-1") || strings.Contains(out, "web-2") || strings.Contains(out, "cli-force-cancelled") {
		t.Errorf("uninstall --force reported a hook or an evacuation that confirmed its cancel, or a hook whose pod left:\n%s", out)
	}
	if nd := getNode(t, c, n[0]); nd.Spec.Unschedulable || nd.Annotations[v1alpha1.AnnotationCordonedBy] != "" || slices.Contains(nd.Finalizers, v1alpha1.FinalizerDrain) {
		t.Errorf("%s after uninstall --force: unschedulable=%t annotations=%v finalizers=%v; want restored", n[0], nd.Spec.Unschedulable, nd.Annotations, nd.Finalizers)
	}
	for i, want := range map[int]string{1: n[1], 2: st.cordonedBy} {
		if nd := getNode(t, c, n[i]); !nd.Spec.Unschedulable || nd.Annotations[v1alpha1.AnnotationCordonedBy] != want {
			t.Errorf("%s after uninstall --force: unschedulable=%t cordoned-by=%q; want it left as it was", n[i], nd.Spec.Unschedulable, nd.Annotations[v1alpha1.AnnotationCordonedBy])
		}
	}
	for _, e := range mutations(t, c, "uninstaller-force", start) {
		if e.ObjectRef != nil && e.ObjectRef.Resource == "nodes" && e.ObjectRef.Name != n[0] {
			t.Errorf("uninstall --force wrote node %s (%s)", e.ObjectRef.Name, e.Verb)
		}
	}
	for _, name := range []string{n[0], n[1]} {
		if err := cl.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.NodeDrain{}); !apierrors.IsNotFound(err) {
			t.Errorf("NodeDrain %s after uninstall --force: %v; want it gone", name, err)
		}
	}
	p := &v1alpha1.EvacuationProvider{}
	if err := cl.Get(ctx, types.NamespacedName{Name: forceProvider}, p); err != nil || slices.Contains(p.Finalizers, providerFinalizer) {
		t.Errorf("EvacuationProvider %s after uninstall --force: finalizers %v (%v); want it there without %s", forceProvider, p.Finalizers, err, providerFinalizer)
	}

	// 4. Nothing holds vacate's objects any more: the CRDs go.
	out = uninstaller.must(ExitOK, "uninstall", "--force", "--timeout", "3s")
	if !strings.Contains(out, "\n  node "+n[1]+" stays cordoned: ") || !strings.Contains(out, "crds: deleted 4: ") {
		t.Errorf("a second uninstall --force: want the nodes still reported and the CRDs deleted:\n%s", out)
	}
	crds, err := decodeManifests(string(must(crdYAML())))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "vacate's CRDs to be gone", testutil.Holds(func() bool {
		for _, o := range crds {
			if exists, _ := present(t, cl, o); exists {
				return false
			}
		}
		return true
	}))
}

// TestForceUncordonTestsWhatItRead: uninstall --force decides from the node
// as it read it. When the node changes before the patch (here: the
// controller came back and restored it, and a newer drain of the node
// cordoned it again), the patch's tests fail, the node is read and judged
// again, and the newer cordon stays. With nothing changed, the same call
// uncordons the node and removes the annotation.
func TestForceUncordonTestsWhatItRead(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	n := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-force-race", Count: 1})
	nd := testutil.NodeDrain(n[0], "", "cli:erin")
	nd.Finalizers = []string{v1alpha1.FinalizerRestore}
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatalf("creating NodeDrain %s: %v", nd.Name, err)
	}
	t.Cleanup(func() { releaseForCleanup(cl, nd) })
	drains := map[string]*v1alpha1.NodeDrain{nd.Name: nd}
	ours := nd.Name + "/" + string(nd.UID)
	cordonWith(t, c, n[0], ours)
	u := forceUninstaller(t, c)

	read := getNode(t, c, n[0]) // what uninstall judged
	newer := nd.Name + "/0b4e1a9c-0000-4000-8000-000000000001"
	cordonWith(t, c, n[0], newer)
	out, seen, err := u.restoreNode(ctx, read, drains)
	if err != nil || out != outcomeKept || seen.Annotations[v1alpha1.AnnotationCordonedBy] != newer {
		t.Errorf("restoreNode after a concurrent cordon: outcome %d, judged cordoned-by=%q, err %v; want kept, judged %q",
			out, seen.Annotations[v1alpha1.AnnotationCordonedBy], err, newer)
	}
	if node := getNode(t, c, n[0]); !node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationCordonedBy] != newer {
		t.Errorf("the newer cordon was undone: unschedulable=%t cordoned-by=%q", node.Spec.Unschedulable, node.Annotations[v1alpha1.AnnotationCordonedBy])
	}

	cordonWith(t, c, n[0], ours)
	out, _, err = u.restoreNode(ctx, getNode(t, c, n[0]), drains)
	if node := getNode(t, c, n[0]); err != nil || out != outcomeUncordoned || node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationCordonedBy] != "" {
		t.Errorf("restoreNode on vacate's own cordon: outcome %d, err %v, unschedulable=%t annotations=%v; want uncordoned",
			out, err, node.Spec.Unschedulable, node.Annotations)
	}
}

// TestNotVacatesCordon: only <name>/<uid> of a drain that exists, of this
// node, and that recorded no other node UID, proves vacate's cordon.
func TestNotVacatesCordon(t *testing.T) {
	nd := testutil.NodeDrain("n1", "", "cli:erin")
	nd.UID, nd.Status.NodeUID = "uid-1", "node-uid-1"
	other := testutil.NodeDrain("n2", "", "cli:erin")
	other.UID = "uid-2"
	drains := map[string]*v1alpha1.NodeDrain{"n1": nd, "n2": other}
	for _, tc := range []struct {
		node, nodeUID, value, want string
	}{
		{"n1", "node-uid-1", "n1/uid-1", ""},
		{"n1", "node-uid-1", "n1", "names no drain UID (written before vacate recorded one, or by hand)"},
		{"n1", "node-uid-1", "", "names no drain UID (written before vacate recorded one, or by hand)"},
		{"n1", "node-uid-1", "n3/uid-3", "names drain n3, which does not exist"},
		{"n1", "node-uid-1", "n1/uid-0", "names drain n1 with UID uid-0, but that drain's UID is uid-1"},
		{"n1", "node-uid-1", "n1/uid-1/x", "names drain n1 with UID uid-1/x, but that drain's UID is uid-1"},
		{"n1", "node-uid-1", "n2/uid-2", "names the drain of node n2"},
		{"n1", "node-uid-9", "n1/uid-1", "names drain n1, which worked on an earlier node of this name (UID node-uid-1)"},
		{"n2", "node-uid-2", "n2/uid-2", ""}, // no node UID recorded yet
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.node, UID: types.UID(tc.nodeUID),
			Annotations: map[string]string{v1alpha1.AnnotationCordonedBy: tc.value}}}
		if got := notVacatesCordon(node, drains); got != tc.want {
			t.Errorf("node %s (uid %s) cordoned-by %q: got %q, want %q", tc.node, tc.nodeUID, tc.value, got, tc.want)
		}
	}
}

// forceUninstaller is an uninstaller for the dev cluster, as 'uninstall
// --force' builds it, for tests of its steps.
func forceUninstaller(t *testing.T, c *devcluster.Cluster) *uninstaller {
	t.Helper()
	flags := newConfigFlags()
	flags.KubeConfig = &c.Kubeconfig
	s, err := dial(flags)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := &uninstallOptions{flags: flags, streams: Streams{In: strings.NewReader(""), Out: &out, Err: &out}, clk: clock.RealClock{}, force: true, timeout: time.Second}
	return &uninstaller{uninstallOptions: o, s: s, served: true}
}

// holdLease makes holder the holder of the controller's default leader
// Lease for an hour, until the test ends, and returns the Lease's key.
func holdLease(t *testing.T, c *devcluster.Cluster, holder string) string {
	t.Helper()
	d := operator.DefaultOptions()
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.LeaderElectionNamespace, Name: d.LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	leases := c.Client.CoordinationV1().Leases(l.Namespace)
	if err := leases.Delete(context.Background(), l.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Lease %s/%s: %v", l.Namespace, l.Name, err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), l.Name, metav1.DeleteOptions{}) })
	return l.Namespace + "/" + l.Name
}

// stuckState is what leaveStuckState made.
type stuckState struct {
	nodes []string
	// cordonedBy is the annotation of nodes[0], copied by hand to nodes[2].
	cordonedBy string
	// ns holds pod web-3, on nodes[0].
	ns string
	// evacuation is the InProgress Evacuation of nodes[0].
	evacuation string
}

// leaveStuckState makes, with no controller running, what one that stopped
// mid-drain leaves, on three new nodes:
//   - nodes[0]: NodeDrain (finalizer vacate.dev/restore, Evacuating,
//     status.nodeUID) that cordoned the node with vacate.dev/cordoned-by
//     <name>/<uid>; the node holds vacate.dev/drain; an EvacuationProvider
//     with vacate.dev/evacuations has an InProgress Evacuation for it; the
//     drain's status has HTTP hooks Completed for a pod that left (web-2),
//     InProgress (web-0), Cancelled (web-1) and Completed for a pod still on
//     the node (web-3);
//   - nodes[1]: a Drained NodeDrain whose node carries the legacy annotation
//     (the drain's name only), and a Cancelled Evacuation;
//   - nodes[2]: no drain; cordoned by hand, with the annotation of nodes[0]
//     copied onto it.
func leaveStuckState(t *testing.T, c *devcluster.Cluster, cl client.Client) stuckState {
	t.Helper()
	ctx := testenv.Context(t)
	n := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-force", Count: 3})
	t.Cleanup(func() { stripFinalizers(t, c, n) }) // before the nodes are deleted
	var drains []*v1alpha1.NodeDrain
	for i, phase := range []v1alpha1.DrainPhase{v1alpha1.PhaseEvacuating, v1alpha1.PhaseDrained} {
		nd := testutil.NodeDrain(n[i], "", "cli:erin")
		nd.Finalizers = []string{v1alpha1.FinalizerRestore} // as the controller adds it
		if err := cl.Create(ctx, nd); err != nil {
			t.Fatalf("creating NodeDrain %s: %v", nd.Name, err)
		}
		t.Cleanup(func() { releaseForCleanup(cl, nd) })
		nd.Status.Phase, nd.Status.NodeUID = phase, string(getNode(t, c, n[i]).UID)
		drains = append(drains, nd)
	}
	ns := testenv.Namespace(t, c)
	pods := map[string]string{} // name -> UID
	for _, name := range []string{"web-3", "web-4", "web-5"} {
		pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, testutil.Pod(name).Namespace(ns).OnNode(n[0]).Obj(), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s/%s: %v", ns, name, err)
		}
		pods[name] = string(pod.UID)
	}
	drains[0].Status.Hooks = []v1alpha1.HookStatus{
		{Name: n[0] + "." + forceProvider, Phase: string(v1alpha1.EvacuationInProgress)},
		{Name: "pod/shop/web-2", Phase: string(v1alpha1.EvacuationCompleted)},
		{Name: "pod/shop/web-0", Phase: string(v1alpha1.EvacuationInProgress), Message: "HTTP hook http://127.0.0.1:8080/evacuate: InProgress"},
		{Name: "pod/shop/web-1", Phase: string(v1alpha1.EvacuationCancelled)},
		{Name: "pod/" + ns + "/web-3", Phase: string(v1alpha1.EvacuationCompleted)},
	}
	// status.hooks is bounded: web-4's call is recorded only in
	// status.hookCalls; web-5's Completed a Decommission evacuation, whose
	// work a cancel keeps; web-3's is listed above too.
	drains[0].Status.HookCalls = []v1alpha1.HookCall{{UID: pods["web-3"]}, {UID: pods["web-4"]}, {UID: pods["web-5"], Completed: true}}
	for _, nd := range drains {
		if err := cl.Status().Update(ctx, nd); err != nil {
			t.Fatalf("writing the status of NodeDrain %s: %v", nd.Name, err)
		}
	}
	st := stuckState{nodes: n, cordonedBy: n[0] + "/" + string(drains[0].UID), ns: ns, evacuation: n[0] + "." + forceProvider}
	cordonWith(t, c, n[0], st.cordonedBy) // as the controller does
	cordonWith(t, c, n[1], n[1])          // as a controller before issue 11 did
	cordonWith(t, c, n[2], st.cordonedBy) // a person copied it
	// As the policy's onNodeDelete: Drain puts it on the node.
	patch := must(json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{v1alpha1.FinalizerDrain}}}))
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("adding %s to node %s: %v", v1alpha1.FinalizerDrain, n[0], err)
	}

	p := &v1alpha1.EvacuationProvider{
		ObjectMeta: metav1.ObjectMeta{Name: forceProvider, Finalizers: []string{providerFinalizer}},
		Spec:       v1alpha1.EvacuationProviderSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "store"}}},
	}
	if err := cl.Create(ctx, p); err != nil {
		t.Fatalf("creating EvacuationProvider %s: %v", p.Name, err)
	}
	t.Cleanup(func() { releaseForCleanup(cl, p) })
	evacuate(t, cl, drains[0], st.evacuation, v1alpha1.DesiredEvacuate, v1alpha1.EvacuationInProgress)
	evacuate(t, cl, drains[1], "cli-force-cancelled", v1alpha1.DesiredCancel, v1alpha1.EvacuationCancelled)
	return st
}

// evacuate creates an Evacuation of the drain, owned by it as the controller
// makes them, and writes the provider's phase for its generation.
func evacuate(t *testing.T, cl client.Client, nd *v1alpha1.NodeDrain, name string, desired v1alpha1.Desired, phase v1alpha1.EvacuationPhase) {
	t.Helper()
	ctx := testenv.Context(t)
	ev := &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeDrain", Name: nd.Name, UID: nd.UID}}},
		Spec: v1alpha1.EvacuationSpec{NodeName: nd.Spec.NodeName, Provider: forceProvider, Mode: v1alpha1.ModeMaintenance,
			Desired: desired, DrainUID: string(nd.UID), Stage: v1alpha1.StageBeforeEviction},
	}
	if err := cl.Create(ctx, ev); err != nil {
		t.Fatalf("creating Evacuation %s: %v", ev.Name, err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ev) })
	ev.Status = v1alpha1.EvacuationStatus{Phase: phase, ObservedGeneration: ev.Generation, HeartbeatTime: &metav1.Time{Time: time.Now()}}
	if err := cl.Status().Update(ctx, ev); err != nil {
		t.Fatalf("writing the status of Evacuation %s: %v", ev.Name, err)
	}
}

// cordonWith cordons a node and sets vacate.dev/cordoned-by to value.
func cordonWith(t *testing.T, c *devcluster.Cluster, node, value string) {
	t.Helper()
	patch := must(json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationCordonedBy: value}},
		"spec":     map[string]any{"unschedulable": true},
	}))
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordoning node %s: %v", node, err)
	}
}

// releaseForCleanup drops the finalizers of an object a test left, and
// deletes it.
func releaseForCleanup(cl client.Client, obj client.Object) {
	ctx := context.Background()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil && len(obj.GetFinalizers()) > 0 {
		obj.SetFinalizers(nil)
		_ = cl.Update(ctx, obj)
	}
	_ = cl.Delete(ctx, obj)
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
