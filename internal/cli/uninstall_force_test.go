package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/operator"
)

// The tests of 'uninstall --force': finishing where the controller is gone,
// from the state a controller stopped mid-drain leaves (leaveStuckState),
// restoring only the nodes vacate provably cordoned.

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
//     that tests what it read, and removes that node's drain conditions
//     (DrainInProgress, Drained; no other), never touches the nodes whose annotation is
//     a legacy value or a copy, releases the NodeDrains, the provider and
//     the node's finalizers, reports what it left behind and exits 0;
//   - a plain uninstall then deletes the CRDs, which nothing holds.
func TestUninstallForceWithoutController(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	reinstallCRDsAfter(t, c)
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
	leftLines := st.leftLines()
	checkDryRun(t, out, append(st.dryRunLines(lease), leftLines...), func() []devcluster.AuditEvent { return mutations(t, c, "uninstaller-force", start) },
		before, func() string { return clusterState(t, c, cl, n, installed) })

	// 3. --force finishes, restores only what vacate provably did, and
	// reports the rest.
	start = time.Now()
	out = uninstaller.must(ExitOK, "uninstall", "--cancel-drains", "--force", "--keep-crds", "--timeout", "3s")
	for _, want := range st.forcedLines(lease, leftLines) {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall --force output lacks %q", want)
		}
	}
	if strings.Contains(out, "web-1") || strings.Contains(out, "web-2") || strings.Contains(out, "cli-force-cancelled") {
		t.Errorf("uninstall --force reported a hook or an evacuation that confirmed its cancel, or a hook whose pod left:\n%s", out)
	}
	checkForceRestoredOnlyItsOwn(t, c, cl, st, start)

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

// leftLines are the lines of what 'uninstall --force' leaves behind in the
// stuck state: the nodes it cannot prove vacate cordoned, the provider that
// did not confirm its cancel, and the hooks that may not have been told.
func (st stuckState) leftLines() []string {
	n := st.nodes
	return []string{
		"  node " + n[1] + " stays cordoned: its vacate.dev/cordoned-by \"" + n[1] + "\" names no drain UID (written before vacate recorded one, or by hand): " +
			"vacate cannot tell it cordoned the node; if nobody else did: kubectl uncordon " + n[1] + " && kubectl annotate node " + n[1] + " vacate.dev/cordoned-by-",
		"  node " + n[2] + " stays cordoned: its vacate.dev/cordoned-by \"" + st.cordonedBy + "\" names the drain of node " + n[0] + ": " +
			"vacate cannot tell it cordoned the node; if nobody else did: kubectl uncordon " + n[2] + " && kubectl annotate node " + n[2] + " vacate.dev/cordoned-by-",
		"  provider " + forceProvider + " may still hold changes for node " + n[0] + " (Evacuation " + st.evacuation + " was InProgress); check the provider",
		"  HTTP hook of pod shop/web-0 on node " + n[0] + " may not have been told to cancel (drain " + n[0] + ", hook was InProgress); check the app",
		"  HTTP hook of pod " + st.ns + "/web-3 on node " + n[0] + " may not have been told to cancel (drain " + n[0] + ", hook was Completed); check the app",
		"  HTTP hook of pod " + st.ns + "/web-4 on node " + n[0] + " may not have been told to cancel (drain " + n[0] + ", hook was called; status.hooks did not list it); check the app",
	}
}

// dryRunLines are the lines 'uninstall --cancel-drains --force --dry-run'
// prints of the stuck state, its drains cancelled already, with the Lease
// lease held.
func (st stuckState) dryRunLines(lease string) []string {
	n := st.nodes
	return []string{
		"drains: would cancel 2: " + n[0] + " (being restored, for cli:erin), " + n[1] + " (being restored, for cli:erin); the controller would restore their nodes",
		"controller: no Deployment vacate-system/vacate-controller installed; nothing to delete",
		"nodes: would uncordon 1 that vacate cordoned: " + n[0] + "; would leave 2 cordoned that vacate cannot prove it cordoned: " + n[1] + ", " + n[2],
		"drains: would remove vacate.dev/restore from 2: " + n[0] + ", " + n[1],
		"evacuation providers: would remove vacate.dev/evacuations from 1: " + forceProvider,
		"controller: a vacate-controller holds Lease " + lease + " (stuck-controller); uninstall would wait until it stops, at most --timeout, then go on (--force)",
		"node finalizers: would remove vacate.dev/drain from 1 of ",
		"would leave behind, if the controller does not restore the drains first:\n",
		"dry run: nothing was changed in the cluster at ",
	}
}

// forcedLines are the lines 'uninstall --cancel-drains --force --keep-crds
// --timeout 3s' prints of the stuck state, the Lease lease held by a stuck
// controller, ending with what it left behind (leftLines).
func (st stuckState) forcedLines(lease string, leftLines []string) []string {
	n := st.nodes
	stuck := "a vacate-controller outside the Deployment still holds Lease " + lease + " as stuck-controller after 3s"
	return []string{
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
		"its CRDs and DrainPolicies are kept",
	}
}

// checkForceRestoredOnlyItsOwn checks the stuck state after 'uninstall
// --force' (started at start): the node vacate provably cordoned is
// restored and released, the two others are left as they were and never
// written, the NodeDrains are gone, and the provider is there without
// vacate's finalizer.
func checkForceRestoredOnlyItsOwn(t *testing.T, c *devcluster.Cluster, cl client.Client, st stuckState, start time.Time) {
	t.Helper()
	ctx := testenv.Context(t)
	n := st.nodes
	if nd := getNode(t, c, n[0]); nd.Spec.Unschedulable || nd.Annotations[v1alpha1.AnnotationCordonedBy] != "" || slices.Contains(nd.Finalizers, v1alpha1.FinalizerDrain) {
		t.Errorf("%s after uninstall --force: unschedulable=%t annotations=%v finalizers=%v; want restored", n[0], nd.Spec.Unschedulable, nd.Annotations, nd.Finalizers)
	}
	conditions := func(name string) (drain, others int) {
		for _, cond := range getNode(t, c, name).Status.Conditions {
			if slices.Contains(v1alpha1.NodeDrainConditions, cond.Type) {
				drain++
			} else {
				others++
			}
		}
		return drain, others
	}
	if drain, others := conditions(n[0]); drain != 0 || others == 0 {
		t.Errorf("%s after uninstall --force: %d drain conditions and %d others; want vacate's removed, the kubelet's kept", n[0], drain, others)
	}
	if drain, _ := conditions(n[1]); drain != 2 {
		t.Errorf("%s after uninstall --force: %d drain conditions; want both left (vacate cannot tell it drained the node)", n[1], drain)
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
	for _, name := range n[:2] {          // the drain conditions the controller sets
		patch := `{"status":{"conditions":[{"type":"DrainInProgress","status":"True","reason":"Evicting","message":"Evicting"},{"type":"Drained","status":"False","reason":"Draining"}]}}`
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("setting the drain conditions of node %s: %v", name, err)
		}
	}
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

// TestUninstallReleasesHookedEvictions: an Eviction (Kubernetes'
// EvictionRequest API) whose pod's hook vacate was cancelling keeps vacate's
// finalizer vacate.dev/hook; once the controller is gone, uninstall plans
// its removal (the dry run names the Eviction), removes exactly that
// finalizer (another's stays) and says the hook may not have been told.
func TestUninstallReleasesHookedEvictions(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	ns := testenv.Namespace(t, c)
	ev := &lifecyclev1alpha1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0", Finalizers: []string{er.FinalizerHook, "example.com/keep"}},
		Spec: lifecyclev1alpha1.EvictionSpec{Target: lifecyclev1alpha1.EvictionTarget{Pod: &lifecyclev1alpha1.EvictionPodReference{
			Name: "db-0", UID: types.UID("5f1f3c4e-0000-4000-8000-000000000009")}}},
	}
	ev, err := c.Client.LifecycleV1alpha1().Evictions(ns).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = c.Client.LifecycleV1alpha1().Evictions(ns).Patch(context.Background(), ev.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	})
	testenv.DrainClient(t, c) // vacate's CRDs
	u := forceUninstaller(t, c)
	// The Evacuation vacate's responder asked for the Eviction, and a
	// drain's that merely carries a stale label: only the first goes.
	asked := &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: "n1.store-" + ns, Finalizers: []string{v1alpha1.FinalizerCancel},
		Labels: map[string]string{v1alpha1.LabelEviction: string(ev.UID)}},
		Spec: v1alpha1.EvacuationSpec{NodeName: "n1", Provider: "store", Mode: v1alpha1.ModeMaintenance, Desired: v1alpha1.DesiredEvacuate, DrainUID: string(ev.UID)}}
	drains := asked.DeepCopy()
	drains.Name, drains.Spec.DrainUID = "n2.store-"+ns, "a-drains-uid"
	for _, e := range []*v1alpha1.Evacuation{asked, drains} {
		if err := u.s.client.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { releaseForCleanup(u.s.client, e) })
	}
	hooked, err := u.hookedEvictions(ctx)
	if err != nil || !slices.Contains(hooked, types.NamespacedName{Namespace: ns, Name: "db-0"}) {
		t.Fatalf("hooked Evictions %v (%v), want %s/db-0 among them", hooked, err, ns)
	}
	line := planReleaseEvictions(clusterView{hooked: hooked, evacuations: []v1alpha1.Evacuation{*asked, *drains}})
	if !strings.Contains(line, "would remove vacate.dev/hook from") || !strings.Contains(line, ns+"/db-0") ||
		!strings.Contains(line, "would delete the 1 Evacuation(s)") || !strings.Contains(line, asked.Name) || strings.Contains(line, drains.Name) {
		t.Errorf("the plan's line %q does not name the Eviction and its Evacuation (only)", line)
	}
	if err := u.releaseEvictions(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := c.Client.LifecycleV1alpha1().Evictions(ns).Get(ctx, "db-0", metav1.GetOptions{})
	if err != nil || !slices.Equal(got.Finalizers, []string{"example.com/keep"}) {
		t.Errorf("the Eviction's finalizers after uninstall: %v (%v), want only example.com/keep", got.Finalizers, err)
	}
	if out := u.streams.Out.(*bytes.Buffer).String(); !strings.Contains(out, "eviction finalizers: removed vacate.dev/hook from") || !strings.Contains(out, "may not have been told") ||
		!strings.Contains(out, "deleted 1 Evacuation(s) vacate asked for pods' Evictions") {
		t.Errorf("uninstall said:\n%s", out)
	}
	if err := u.s.client.Get(ctx, client.ObjectKeyFromObject(asked), &v1alpha1.Evacuation{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Eviction's Evacuation after uninstall: %v, want it gone", err)
	}
	kept := &v1alpha1.Evacuation{}
	if err := u.s.client.Get(ctx, client.ObjectKeyFromObject(drains), kept); err != nil || !kept.DeletionTimestamp.IsZero() || !slices.Contains(kept.Finalizers, v1alpha1.FinalizerCancel) {
		t.Errorf("the drain's Evacuation after the step: %+v (%v), want it untouched", kept.ObjectMeta, err)
	}
}
