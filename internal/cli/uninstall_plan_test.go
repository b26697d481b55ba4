package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// planView is a cluster as uninstall reads it, built by hand: vacate
// installed as 'manifests install' renders it, a drain of n1 that cordoned
// it, n2 cordoned with a legacy annotation, n3 holding vacate.dev/drain, a
// provider with its finalizer and an unfinished Evacuation, a hook called
// on a pod still on n1, a stuck controller outside the Deployment, and a
// binding someone made for a person.
func planView(t *testing.T, inst installed) clusterView {
	t.Helper()
	nd := *testutil.NodeDrain("n1", "", "cli:erin")
	nd.UID, nd.Status.Phase, nd.Status.NodeUID = "uid-1", v1alpha1.PhaseEvacuating, "node-uid-1"
	nd.Status.Hooks = []v1alpha1.HookStatus{
		{Name: "pod/shop/web-0", Phase: string(v1alpha1.EvacuationInProgress)},
		{Name: "pod/shop/web-1", Phase: string(v1alpha1.EvacuationCompleted)}, // left the node: holds nothing
	}
	node := func(name, uid, cordonedBy string, cordoned bool, finalizers ...string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), Finalizers: finalizers}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
		if cordonedBy != "" {
			n.Annotations = map[string]string{v1alpha1.AnnotationCordonedBy: cordonedBy}
		}
		return n
	}
	objects := map[string]objectState{}
	for _, objs := range [][]*unstructured.Unstructured{inst.crds, inst.controller, inst.rest} {
		for _, o := range objs {
			objects[objectName(o)] = objectPresent
		}
	}
	return clusterView{
		served: true,
		drains: []v1alpha1.NodeDrain{nd},
		nodes: []corev1.Node{node("n1", "node-uid-1", "n1/uid-1", true), node("n2", "node-uid-2", "n2", true),
			node("n3", "node-uid-3", "", false, v1alpha1.FinalizerDrain, foreignFinalizer)},
		policies: []v1alpha1.DrainPolicy{{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultPolicyName}}},
		evacuations: []v1alpha1.Evacuation{{ObjectMeta: metav1.ObjectMeta{Name: "n1.store", Generation: 1},
			Spec:   v1alpha1.EvacuationSpec{NodeName: "n1", Provider: "store", Desired: v1alpha1.DesiredEvacuate},
			Status: v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationInProgress, ObservedGeneration: 1}}},
		providers: []v1alpha1.EvacuationProvider{{ObjectMeta: metav1.ObjectMeta{Name: "store", Finalizers: []string{v1alpha1.FinalizerEvacuations}}}},
		podNodes:  map[string]string{"shop/web-0": "n1"},
		objects:   objects,
		leases: []leaseView{{key: types.NamespacedName{Namespace: "vacate-system", Name: "vacate-controller"}},
			{key: types.NamespacedName{Namespace: "kube-system", Name: "vacate-controller"}, holder: "stuck"}},
		bindings: []rbacv1.ClusterRoleBinding{{ObjectMeta: metav1.ObjectMeta{Name: "carol"},
			RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "vacate-user"}}},
	}
}

// printed is the plan as --dry-run prints it.
func printed(p uninstallPlan, force bool) string {
	var b strings.Builder
	p.write(func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...) + "\n") }, force)
	return b.String()
}

// TestPlanUninstall: the planner, on hand-built views, with no API server.
func TestPlanUninstall(t *testing.T) {
	inst := must(installedObjects())
	v := planView(t, inst)

	// Without --cancel-drains: refused, naming the drain.
	if p := planUninstall(v, inst, uninstallChoices{}); p.refusal == nil ||
		!strings.Contains(p.refusal.Error(), "1 drain(s) in place: n1 (Evacuating, for cli:erin)") {
		t.Errorf("plan without --cancel-drains: refusal %v, want the drain named", p.refusal)
	}
	// A trigger that would request the drain again: refused too.
	tainted := planView(t, inst)
	tainted.nodes[0].Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintDrain, Effect: corev1.TaintEffectNoSchedule}}
	if p := planUninstall(tainted, inst, uninstallChoices{cancelDrains: true}); p.refusal == nil ||
		!strings.Contains(p.refusal.Error(), "a trigger would request these again at once: n1 (taint vacate.dev/drain (NoSchedule))") {
		t.Errorf("plan with a trigger on the node: refusal %v, want it named", p.refusal)
	}

	// --force: every step in order, each with its reason, and what it
	// would leave behind.
	p := planUninstall(v, inst, uninstallChoices{cancelDrains: true, force: true})
	if p.refusal != nil {
		t.Fatalf("refused: %v", p.refusal)
	}
	var kinds []stepKind
	for _, s := range p.steps {
		kinds = append(kinds, s.kind)
		if s.why == "" {
			t.Errorf("step %d has no reason", s.kind)
		}
	}
	want := []stepKind{stepCancelDrains, stepStopController, stepUndoLeft, stepReleaseNodes, stepDeletePolicies, stepDeleteRest, stepDeleteCRDs, stepNoteBindings}
	if !slices.Equal(kinds, want) {
		t.Errorf("steps %v, want %v", kinds, want)
	}
	out := printed(p, true)
	for _, line := range []string{
		"1. drains: would cancel 1: n1 (Evacuating, for cli:erin); the controller would restore their nodes (--force: ",
		"2. controller: would delete 2: PodDisruptionBudget vacate-system/vacate-controller, Deployment vacate-system/vacate-controller; its 0 pod(s) would stop\n",
		"   controller: a vacate-controller holds Lease kube-system/vacate-controller (stuck); uninstall would wait until it stops, at most --timeout, then go on (--force)\n",
		"3. nodes: would uncordon 1 that vacate cordoned: n1; would leave 1 cordoned that vacate cannot prove it cordoned: n2 (see below)\n",
		"   drains: would remove vacate.dev/restore from 1: n1\n",
		"   evacuation providers: would remove vacate.dev/evacuations from 1: store\n",
		"4. node finalizers: would remove vacate.dev/drain from 1 of 3 node(s)\n",
		"5. drain policies: would delete 1: default\n",
		"6. rbac and namespace: would delete ",
		"7. crds: would delete 4: ",
		"8. note: ClusterRoleBinding(s) not made by 'vacate manifests install' still bind vacate's roles: carol (to vacate-user)",
		"   why: last: deleting a CRD deletes every object of its kind",
		"would leave behind, if the controller does not restore the drains first:\n  node n2 stays cordoned: its vacate.dev/cordoned-by \"n2\" names no drain UID",
		"  provider store may still hold changes for node n1 (Evacuation n1.store was InProgress); check the provider\n",
		"  HTTP hook of pod shop/web-0 on node n1 may not have been told to cancel (drain n1, hook was InProgress); check the app\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("the plan lacks %q:\n%s", line, out)
		}
	}
	if strings.Contains(out, "web-1") || strings.Contains(out, "vacate-system/vacate-controller (") {
		t.Errorf("the plan names a hook whose pod left, or a free Lease:\n%s", out)
	}

	// Without --force, --keep-crds: no undo of its own but the providers'
	// finalizer; the CRDs and policies stay; what is gone is said so.
	v.objects[objectName(inst.deployment())] = objectAbsent
	v.objects["PodDisruptionBudget vacate-system/vacate-controller"] = objectDeleting
	out = printed(planUninstall(v, inst, uninstallChoices{cancelDrains: true, keepCRDs: true}), false)
	for _, line := range []string{
		"2. controller: 1 already being deleted: PodDisruptionBudget vacate-system/vacate-controller; 1 not there; its 0 pod(s) would stop\n",
		"3. evacuation providers: would remove vacate.dev/evacuations from 1: store\n",
		"4. node finalizers: would remove",
		"5. drain policies: 1 kept (--keep-crds): default\n",
		"7. crds: kept (--keep-crds): drainpolicies.vacate.dev, ",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("the plan without --force, with --keep-crds, lacks %q:\n%s", line, out)
		}
	}
	if strings.Contains(out, "would uncordon") || strings.Contains(out, "would leave behind") {
		t.Errorf("a plan without --force undoes or reports what only --force does:\n%s", out)
	}

	// A cluster that does not serve vacate's API: nothing of vacate's to
	// cancel or release.
	out = printed(planUninstall(clusterView{objects: map[string]objectState{}}, inst, uninstallChoices{}), false)
	for _, line := range []string{
		"1. drains: none (the cluster does not serve vacate's API)\n",
		"2. controller: no Deployment vacate-system/vacate-controller installed; nothing to delete\n",
		"3. evacuation providers: none (the cluster does not serve vacate's API)\n",
		"5. drain policies: none (the cluster does not serve vacate's API)\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("the plan for a cluster without vacate lacks %q:\n%s", line, out)
		}
	}
}

// TestDaemonSetTaintsJudged (issue 23): --force removes the taint
// vacate.dev/draining only where its value is the UID of the node's own
// drain; another value is left, with what a person may do.
func TestDaemonSetTaintsJudged(t *testing.T) {
	drain := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}}
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "other", Effect: corev1.TaintEffectNoSchedule},
			{Key: v1alpha1.TaintDaemonSetsOff, Value: "uid-1", Effect: corev1.TaintEffectNoSchedule}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: v1alpha1.TaintDaemonSetsOff, Value: "uid-9", Effect: corev1.TaintEffectNoSchedule}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n3"}},
	}
	tainted, kept := daemonSetTaints(nodes, map[string]*v1alpha1.NodeDrain{"n1": drain})
	if len(tainted) != 1 || tainted[0] != "n1" {
		t.Errorf("tainted = %v, want [n1]", tainted)
	}
	if len(kept) != 1 || !strings.Contains(kept[0], "node n2 keeps the taint vacate.dev/draining=uid-9") || !strings.Contains(kept[0], "kubectl taint node n2 vacate.dev/draining-") {
		t.Errorf("kept = %v, want n2 with what to do", kept)
	}
}
