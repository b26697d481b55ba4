package nodedrain_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const testLabel = "vacate.dev/test"

// env is a dev cluster with vacate's CRDs and a running controller.
type env struct {
	c  *devcluster.Cluster
	cl client.Client
}

func startEnv(t *testing.T) *env {
	t.Helper()
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	return &env{c: c, cl: cl}
}

func (e *env) waitDrain(t *testing.T, name, what string, timeout time.Duration, cond func(*v1alpha1.NodeDrain) bool) *v1alpha1.NodeDrain {
	t.Helper()
	return testenv.WaitForDrain(t, e.cl, name, what, timeout, cond, testenv.DescribeDrain)
}

// TestDrainFollowsPolicyExplainsBlockersAndUndoes is the first acceptance
// scenario: Deployment pods behind a PDB, a DaemonSet pod, a bare pod, an
// emptyDir pod and a completed pod on one node.
func TestDrainFollowsPolicyExplainsBlockersAndUndoes(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	sel := map[string]string{testLabel: "policy"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "pol", Count: 3, Zones: []string{"zone-a", "zone-b"}, Labels: sel})
	target := nodes[0]
	ns := testenv.Namespace(t, e.c)

	t.Log("creating web (6 replicas, PDB maxUnavailable 1) on the test nodes, a DaemonSet, and on the target a bare pod, an emptyDir pod and a Job's pod")
	createPolicyScenario(t, e, ns, target, sel)
	guard := testenv.WatchPDBs(t, e.c, ns)

	t.Log("draining the target with a strict policy (the defaults)")
	strict := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "policy-test"}}
	if err := e.cl.Create(ctx, strict); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), strict) })
	nd := testutil.NodeDrain(target, strict.Name, "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })

	blocked := e.waitDrain(t, target, "blocked only by the bare and emptyDir pods", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Remaining == 2 && nd.Status.Blocked == 2
	})
	t.Logf("status while blocked: %s", testenv.DescribeDrain(blocked))
	checkBlockedByBareAndEmptyDir(t, e, ns, target, blocked)
	t.Log("kubectl describe shows the drain on the node and why on the pods it holds")
	describeShows(t, e, []string{"describe", "node", target}, "DrainStarted", "DrainBlocked", "draining node "+target, "pod(s) blocked: ")
	describeShows(t, e, []string{"describe", "pod", "-n", ns, "bare"}, "EvictionHeld", "NodeDrain "+target, "Unmanaged")

	t.Log("relaxing the policy: unmanaged pods Delete, localStorage Evict")
	relaxPolicy(t, e, strict)
	done := e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	if done.Status.Remaining != 0 || done.Status.Blocked != 0 || done.Status.Total < 3 || done.Status.Evicted != done.Status.Total {
		t.Errorf("counts when drained: %s", testenv.DescribeDrain(done))
	}
	left := podsOn(t, e, ns, target)
	if hasApp(left, "web") || hasApp(left, "bare") || hasApp(left, "scratch") {
		t.Errorf("pods that had to leave are still there: %v", names(left))
	}

	t.Log("deleting the NodeDrain: vacate uncordons the node it cordoned and lets go")
	if err := e.cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, target)
	node, err := cs.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable {
		t.Error("node still cordoned after the NodeDrain was deleted")
	}
	if _, ok := node.Annotations[v1alpha1.AnnotationCordonedBy]; ok {
		t.Error("vacate's annotation left on the node")
	}
	waitEvents(t, e, target, v1alpha1.EventCordoned, v1alpha1.EventDrained, v1alpha1.EventRestored)
	describeShows(t, e, []string{"describe", "node", target}, "Drained", "Restored", "uncordoned node "+target)
	checkEvictedEvents(t, e, ns, target)
	guard.Check(t)
}

// describeShows runs the real kubectl with args until its output shows
// every one of want (events come a moment after the status records them).
func describeShows(t *testing.T, e *env, args []string, want ...string) {
	t.Helper()
	var out []byte
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		out, err = exec.Command(e.c.Binaries[devcluster.Kubectl], append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			return false, nil
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("kubectl %s does not show %q:\n%s", strings.Join(args, " "), want, out)
	}
}

// checkEvictedEvents checks that each pod the drain evicted has an Evicted
// event naming the drain: the pods are gone, their events stay.
func checkEvictedEvents(t *testing.T, e *env, ns, target string) {
	t.Helper()
	list, err := e.c.Client.CoreV1().Events(ns).List(testenv.Context(t), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,reason=" + v1alpha1.EventEvicted})
	if err != nil {
		t.Fatal(err)
	}
	evicted := map[string]bool{}
	for _, ev := range list.Items {
		if !strings.Contains(ev.Message, "NodeDrain "+target) || ev.Related == nil || ev.Related.Kind != "NodeDrain" {
			t.Errorf("Evicted event of pod %s: %q, related %+v; want it to name NodeDrain %s", ev.InvolvedObject.Name, ev.Message, ev.Related, target)
		}
		evicted[ev.InvolvedObject.Name] = true
	}
	// Two web pods, the bare pod and the emptyDir pod left through the
	// Eviction API (the relaxed policy deletes the bare one).
	if len(evicted) < 3 {
		t.Errorf("Evicted events on %d pod(s) (%v), want one on each pod the drain evicted (at least 3)", len(evicted), evicted)
	}
}

// createPolicyScenario creates the workloads of the first scenario and
// waits until they run: web (6 replicas spread over the nodes sel selects,
// two on target, PDB maxUnavailable 1) and the agent DaemonSet, and on
// target a bare pod, a Deployment's pod with an emptyDir and a Job's pod
// that has succeeded.
func createPolicyScenario(t *testing.T, e *env, ns, target string, sel map[string]string) {
	t.Helper()
	ctx := testenv.Context(t)
	cs := e.c.Client
	if err := devcluster.CreateWorkload(ctx, cs, devcluster.Workload{Namespace: ns, DeploymentReplicas: 6, StatefulSetReplicas: 0, NodeSelector: sel,
		SpreadDeployment: true}); err != nil { // two web pods on each node, the target included
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "bare", target), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scratch := devcluster.Deployment(ns, "scratch", 1)
	// Its replacement must not come back to the cordoned node.
	scratch.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: target}
	scratch.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, scratch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "report"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{devcluster.AppLabel: "report"}},
			Spec: corev1.PodSpec{NodeName: target, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "report", Image: "vacate.dev/simulated:latest"}}},
		}},
	}
	if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), 6, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if !hasApp(podsOn(t, e, ns, target), "web") {
		t.Fatalf("no web pod on the target %s: the scenario needs some (pods there: %v)", target, names(podsOn(t, e, ns, target)))
	}
	waitPods(t, e, ns, "the Job's pod to succeed", func(pods []corev1.Pod) bool {
		for _, p := range pods {
			if p.Labels[devcluster.AppLabel] == "report" && p.Status.Phase == corev1.PodSucceeded {
				return true
			}
		}
		return false
	})
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "web", 6, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// checkBlockedByBareAndEmptyDir checks the drain of target under the
// strict policy: the bare pod and the emptyDir pod block it, each with its
// reason; its conditions say so and name the pods left in place; the node
// is cordoned by the drain; web's pods left and the DaemonSet's and the
// Job's stayed.
func checkBlockedByBareAndEmptyDir(t *testing.T, e *env, ns, target string, blocked *v1alpha1.NodeDrain) {
	t.Helper()
	ctx := testenv.Context(t)
	reasons := map[string]string{}
	for _, b := range blocked.Status.Blockers {
		reasons[strings.SplitN(b.Pod, "/", 2)[1]] = b.Reason + ": " + b.Detail
	}
	if !strings.HasPrefix(reasons["bare"], "Unmanaged: no controller would recreate it") {
		t.Errorf("bare pod blocker = %q", reasons["bare"])
	}
	var scratchReason string
	for pod, r := range reasons {
		if strings.HasPrefix(pod, "scratch-") {
			scratchReason = r
		}
	}
	if !strings.HasPrefix(scratchReason, "LocalStorage: emptyDir tmp would be lost") {
		t.Errorf("emptyDir pod blocker = %q", scratchReason)
	}
	if c := meta.FindStatusCondition(blocked.Status.Conditions, v1alpha1.ConditionBlocked); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Blocked condition = %+v", c)
	}
	// The status accounts for the pods left in place too.
	if c := meta.FindStatusCondition(blocked.Status.Conditions, v1alpha1.ConditionPodsEvicted); c == nil ||
		!strings.HasSuffix(c.Message, "left in place: 1 Completed, 1 DaemonSetPod") {
		t.Errorf("PodsEvicted condition = %+v, want it to name the Completed and DaemonSet pods left in place", c)
	}
	node, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationCordonedBy] != v1alpha1.CordonedByValue(blocked) {
		t.Errorf("node not cordoned by vacate: unschedulable=%t annotations=%v", node.Spec.Unschedulable, node.Annotations)
	}
	left := podsOn(t, e, ns, target)
	for _, p := range left {
		app := p.Labels[devcluster.AppLabel]
		if app == "web" {
			t.Errorf("web pod %s still on the drained node", p.Name)
		}
	}
	if !hasApp(left, "agent") || !hasApp(left, "report") {
		t.Errorf("the DaemonSet pod and the completed Job pod should stay; left: %v", names(left))
	}
}

// relaxPolicy lets the policy delete unmanaged pods and evict pods with
// local storage.
func relaxPolicy(t *testing.T, e *env, strict *v1alpha1.DrainPolicy) {
	t.Helper()
	ctx := testenv.Context(t)
	// The policy controller writes its status: update on the latest copy.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(strict), strict); err != nil {
			return err
		}
		strict.Spec.Pods.Unmanaged, strict.Spec.Pods.LocalStorage = "Delete", "Evict"
		return e.cl.Update(ctx, strict)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestUndoLeavesSomeoneElsesCordon: a node cordoned before the drain stays
// cordoned after it.
func TestUndoLeavesSomeoneElsesCordon(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "precord", Count: 1, Labels: map[string]string{testLabel: "precordoned"}})
	target := nodes[0]
	patch := []byte(`{"spec":{"unschedulable":true},"metadata":{"labels":{"cordoned-by":"admin"}}}`)
	if _, err := e.c.Client.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nd := testutil.NodeDrain(target, "", "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	drained := e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if c := meta.FindStatusCondition(drained.Status.Conditions, v1alpha1.ConditionCordoned); c == nil || c.Reason != v1alpha1.ReasonAlreadyCordoned {
		t.Errorf("Cordoned condition = %+v, want reason %s", c, v1alpha1.ReasonAlreadyCordoned)
	}
	if err := e.cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, target)
	after, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Spec.Unschedulable {
		t.Error("vacate uncordoned a node someone else had cordoned")
	}
	// The node lifecycle controller adds the deprecated beta.kubernetes.io
	// labels on its own; everything else must be as it was.
	if fmt.Sprint(ownLabels(after.Labels)) != fmt.Sprint(ownLabels(before.Labels)) || fmt.Sprint(after.Annotations) != fmt.Sprint(before.Annotations) ||
		fmt.Sprint(ownTaints(after.Spec.Taints)) != fmt.Sprint(ownTaints(before.Spec.Taints)) {
		t.Errorf("node metadata changed:\nbefore labels %v annotations %v\nafter  labels %v annotations %v",
			before.Labels, before.Annotations, after.Labels, after.Annotations)
	}
}

// TestNodeNotFoundWaitsThenProceeds: a drain of a missing node waits with
// NodeNotFound and starts when the node appears.
func TestNodeNotFoundWaitsThenProceeds(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	name := "late-node-0"
	nd := testutil.NodeDrain(name, "", "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })
	e.waitDrain(t, name, "waiting with NodeNotFound", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionCordoned)
		return c != nil && c.Reason == v1alpha1.ReasonNodeNotFound && nd.Status.Phase == v1alpha1.PhasePending
	})
	testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "late-node", Count: 1})
	e.waitDrain(t, name, "Drained once the node exists", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
}

func ownLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if !strings.HasPrefix(k, "beta.kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}

// ownTaints drops the node.kubernetes.io taints the controller manager keeps
// in step with the node's conditions and cordon.
func ownTaints(ts []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range ts {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			out = append(out, t)
		}
	}
	return out
}

// waitEvents waits until the NodeDrain has Kubernetes Events with every
// reason.
func waitEvents(t *testing.T, e *env, drainName string, reasons ...string) {
	t.Helper()
	var seen map[string]bool
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=NodeDrain,involvedObject.name=" + drainName})
		if err != nil {
			return false, nil
		}
		seen = map[string]bool{}
		for _, ev := range list.Items {
			seen[ev.Reason] = true
		}
		for _, r := range reasons {
			if !seen[r] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("events of NodeDrain %s: saw %v, want %v", drainName, seen, reasons)
	}
}

// apiBehindPDB runs Deployment "api" of n pods on the nodes matching sel,
// behind PDB "api" with the given maxUnavailable, and waits until the PDB's
// status counts them all healthy.
func apiBehindPDB(t *testing.T, e *env, ns string, sel map[string]string, n int32, maxUnavailable string) {
	t.Helper()
	ctx := testenv.Context(t)
	cs := e.c.Client
	dep := devcluster.Deployment(ns, "api", n)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "api", "api", "", maxUnavailable), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "api"}), int(n), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "api", n, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, e *env, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.NodeDrain{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("NodeDrain %s was not released: %v", name, err)
	}
}

func waitPods(t *testing.T, e *env, ns, what string, cond func([]corev1.Pod) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && cond(list.Items), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func podsOn(t *testing.T, e *env, ns, node string) []corev1.Pod {
	t.Helper()
	list, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func hasApp(pods []corev1.Pod, app string) bool {
	for _, p := range pods {
		if p.Labels[devcluster.AppLabel] == app {
			return true
		}
	}
	return false
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// TestTightPDBBlocksUntilRelaxed: a PDB with maxUnavailable 0 blocks the
// drain, named in the status with its pods; relaxing it lets the drain
// finish with no other action.
func TestTightPDBBlocksUntilRelaxed(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	sel := map[string]string{testLabel: "tight"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "tight", Count: 2, Labels: sel})
	ns := testenv.Namespace(t, e.c)
	apiBehindPDB(t, e, ns, sel, 4, "0")
	guard := testenv.WatchPDBs(t, e.c, ns)
	target := nodes[0]
	onTarget := len(podsOn(t, e, ns, target))
	if onTarget == 0 {
		target = nodes[1]
		onTarget = len(podsOn(t, e, ns, target))
	}
	nd := testutil.NodeDrain(target, "", "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })

	blocked := e.waitDrain(t, target, "Blocked by PDB api", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return c != nil && c.Status == metav1.ConditionTrue && int(nd.Status.Blocked) == onTarget
	})
	t.Logf("status while blocked: %s", testenv.DescribeDrain(blocked))
	for _, b := range blocked.Status.Blockers {
		if b.Reason != v1alpha1.BlockerPDB || !strings.Contains(b.Detail, ns+"/api") {
			t.Errorf("blocker %s: %s %q, want PodDisruptionBudget naming %s/api", b.Pod, b.Reason, b.Detail, ns)
		}
	}
	if len(podsOn(t, e, ns, target)) != onTarget {
		t.Error("a pod left the node although its PDB allows no disruption")
	}

	t.Log("relaxing the PDB to maxUnavailable 1")
	patch := []byte(`{"spec":{"maxUnavailable":1}}`)
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, "api", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	done := e.waitDrain(t, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	if len(podsOn(t, e, ns, target)) != 0 {
		t.Errorf("pods left on the drained node: %v", names(podsOn(t, e, ns, target)))
	}
	guard.Check(t)
}

// TestDrainTimeout: past timeouts.drain a drain held by a PDB fails with
// the pods in place (onTimeout Fail), or, only when the policy says
// ForceDelete, the remaining pods are deleted and the drain ends Drained.
func TestDrainTimeout(t *testing.T) {
	e := startEnv(t)
	for _, tc := range []struct {
		onTimeout string
		want      v1alpha1.DrainPhase
	}{
		{"Fail", v1alpha1.PhaseFailed},
		{"ForceDelete", v1alpha1.PhaseDrained},
	} {
		t.Run(tc.onTimeout, func(t *testing.T) {
			ctx := testenv.Context(t)
			prefix := "timeout-" + strings.ToLower(tc.onTimeout)
			sel := map[string]string{testLabel: prefix}
			nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix, Count: 1, Labels: sel})
			ns := testenv.Namespace(t, e.c)
			apiBehindPDB(t, e, ns, sel, 2, "0")
			policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}}
			policy.Spec.Timeouts.Drain = &metav1.Duration{Duration: 3 * time.Second}
			policy.Spec.Timeouts.OnTimeout = tc.onTimeout
			if err := e.cl.Create(ctx, policy); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.cl.Delete(context.Background(), policy) })
			target := nodes[0]
			nd := testutil.NodeDrain(target, policy.Name, "cli:test")
			if err := e.cl.Create(ctx, nd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })
			end := e.waitDrain(t, target, string(tc.want), time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == tc.want })
			t.Logf("status: %s", testenv.DescribeDrain(end))
			c := meta.FindStatusCondition(end.Status.Conditions, v1alpha1.ConditionBlocked)
			left := podsOn(t, e, ns, target)
			switch tc.onTimeout {
			case "Fail":
				if c == nil || c.Reason != v1alpha1.ReasonDrainTimeout {
					t.Errorf("Blocked condition %+v, want reason %s", c, v1alpha1.ReasonDrainTimeout)
				}
				if len(left) != 2 {
					t.Errorf("%d pods left on the node, want both kept in place", len(left))
				}
			case "ForceDelete":
				if len(left) != 0 {
					t.Errorf("pods left after ForceDelete: %v", names(left))
				}
				waitEvents(t, e, target, v1alpha1.EventForceDeleted)
			}
		})
	}
}

// TestRequesterDeadline: a requester's deadline (a spot notice's
// termination time) is the drain's, shown in status.deadline. Under
// onTimeout Fail a drain held by a PDB past it is not failed (stopping would
// leave the pods on a machine that goes): it drains on, and its Blocked
// condition says the deadline passed. Under ForceDelete the pods still there
// are deleted once it has passed, and the drain ends Drained. The policy has
// no drain timeout.
func TestRequesterDeadline(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	const prefix = "deadline"
	sel := map[string]string{testLabel: prefix}
	target := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix, Count: 1, Labels: sel})[0]
	ns := testenv.Namespace(t, e.c)
	apiBehindPDB(t, e, ns, sel, 2, "0")
	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}}
	if err := e.cl.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), policy) })
	nd := testutil.NodeDrain(target, policy.Name, "cli:test")
	soon := metav1.NewTime(time.Now().Add(4 * time.Second).Truncate(time.Second))
	later := metav1.NewTime(soon.Add(time.Hour))
	nd.Spec.Requesters = []v1alpha1.Requester{
		{Name: "agent:aws-spot", Reason: "spot interruption", Deadline: &soon},
		{Name: "agent:gcp-maintenance", Deadline: &later},
		{Name: "cli:test"},
	}
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })
	e.waitDrain(t, target, "status.deadline", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		d := nd.Status.Deadline
		return d != nil && d.Requester == "agent:aws-spot" && d.Time.Equal(&soon)
	})
	past := e.waitDrain(t, target, "past its deadline, still draining", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return nd.Status.Phase == v1alpha1.PhaseFailed || (c != nil && strings.Contains(c.Message, "past the deadline of requester agent:aws-spot"))
	})
	if past.Status.Phase != v1alpha1.PhaseEvicting {
		t.Fatalf("under onTimeout Fail the drain past its deadline is %s, want it Evicting on: %s", past.Status.Phase, testenv.DescribeDrain(past))
	}
	if left := podsOn(t, e, ns, target); len(left) != 2 {
		t.Errorf("%d pods left on the node, want both (the PDB allows no disruption)", len(left))
	}

	t.Log("the policy says ForceDelete: the deadline has passed, so the pods go and the drain is Drained")
	updatePolicy(t, e, prefix, func(s *v1alpha1.DrainPolicySpec) { s.Timeouts.OnTimeout = "ForceDelete" })
	end := e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if end.Status.CompletionTime == nil || end.Status.CompletionTime.Before(&soon) {
		t.Errorf("completed at %v, before the deadline %v", end.Status.CompletionTime, soon)
	}
	waitEvents(t, e, target, v1alpha1.EventForceDeleted)
}

// TestEmptyingRequestersUndoes: when the last requester leaves, vacate
// uncordons the node it cordoned and releases its finalizer; the NodeDrain
// object stays, idle.
func TestEmptyingRequestersUndoes(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	sel := map[string]string{testLabel: "requesters"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "req", Count: 1, Labels: sel})
	ns := testenv.Namespace(t, e.c)
	apiBehindPDB(t, e, ns, sel, 2, "0")
	target := nodes[0]
	nd := testutil.NodeDrain(target, "", "cli:alice", "cli:bob")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })
	e.waitDrain(t, target, "cordoned and blocked", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseEvicting && nd.Status.Blocked == 2
	})
	setRequesters := func(json string) {
		t.Helper()
		if err := e.cl.Patch(ctx, nd, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"requesters":`+json+`}}`))); err != nil {
			t.Fatal(err)
		}
	}
	t.Log("one requester leaves: the drain goes on")
	setRequesters(`[{"name":"cli:bob"}]`)
	e.waitDrain(t, target, "still draining", 10*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return len(nd.Spec.Requesters) == 1 && nd.Status.Phase == v1alpha1.PhaseEvicting
	})
	node, err := cs.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !node.Spec.Unschedulable {
		t.Fatal("node uncordoned while a requester remains")
	}
	t.Log("the last requester leaves: vacate undoes")
	setRequesters(`[]`)
	idle := e.waitDrain(t, target, "idle and restored", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhasePending && len(nd.Finalizers) == 0
	})
	t.Logf("status: %s", testenv.DescribeDrain(idle))
	node, err = cs.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.Unschedulable || node.Annotations[v1alpha1.AnnotationCordonedBy] != "" {
		t.Errorf("node not restored: unschedulable=%t annotations=%v", node.Spec.Unschedulable, node.Annotations)
	}
	if n := len(podsOn(t, e, ns, target)); n != 2 {
		t.Errorf("%d pods on the node, want the 2 that the PDB protected", n)
	}
}
