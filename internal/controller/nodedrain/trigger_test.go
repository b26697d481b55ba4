package nodedrain_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/requests"
)

// updateNode changes a node, retrying on conflicts.
func updateNode(t *testing.T, e *env, name string, change func(*corev1.Node)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		_, err = e.c.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func withoutTaint(key string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != key {
				kept = append(kept, t)
			}
		}
		n.Spec.Taints = kept
	}
}

func requesterNames(nd *v1alpha1.NodeDrain) []string {
	var out []string
	for _, r := range nd.Spec.Requesters {
		out = append(out, r.Name)
	}
	return out
}

// TestTaintTriggerAndAnotherRequester: the taint vacate.dev/drain drains the
// node as requester "taint"; a person joins; removing the taint withdraws
// only the taint's request (the node stays drained); the person's cancel
// restores the node and removes the NodeDrain.
func TestTaintTriggerAndAnotherRequester(t *testing.T) {
	e := startEnv(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "taint", Count: 1})
	node := nodes[0]
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})

	updateNode(t, e, node, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDrain, Effect: corev1.TaintEffectNoSchedule})
	})
	nd := e.waitDrain(t, node, "Drained for the taint", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	if got := requesterNames(nd); len(got) != 1 || got[0] != v1alpha1.RequesterTaint {
		t.Fatalf("requesters %v, want only %q", got, v1alpha1.RequesterTaint)
	}
	// The node says it too, in the conditions Kubernetes defines for drains.
	waitNodeConditions(t, e, node, "Drained True, DrainInProgress False", func(c map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		return c[corev1.NodeDrained].Status == corev1.ConditionTrue && c[corev1.NodeDrainInProgress].Status == corev1.ConditionFalse &&
			strings.Contains(c[corev1.NodeDrained].Message, "vacate NodeDrain "+node)
	})
	if err := requests.Apply(context.Background(), e.cl, node, v1alpha1.Requester{Name: "cli:alice"}, nd.Spec.Mode, ""); err != nil {
		t.Fatal(err)
	}

	updateNode(t, e, node, withoutTaint(v1alpha1.TaintDrain))
	nd = e.waitDrain(t, node, "left with alice's request only", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		got := requesterNames(nd)
		return len(got) == 1 && got[0] == "cli:alice"
	})
	time.Sleep(time.Second)
	if n := getNode(t, e, node); !n.Spec.Unschedulable {
		t.Fatal("the node was uncordoned while alice still requests the drain")
	}

	after, err := requests.Withdraw(context.Background(), e.cl, nd, "cli:alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := requests.DeleteIfIdle(context.Background(), e.cl, after); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, node)
	if n := getNode(t, e, node); n.Spec.Unschedulable {
		t.Error("the node is still cordoned after the last requester left")
	}
	waitNodeConditions(t, e, node, "no drain conditions once undone", func(c map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		_, inProgress := c[corev1.NodeDrainInProgress]
		_, drained := c[corev1.NodeDrained]
		return !inProgress && !drained
	})
}

// waitNodeConditions waits until the node's conditions, by type, satisfy
// cond.
func waitNodeConditions(t *testing.T, e *env, name, what string, cond func(map[corev1.NodeConditionType]corev1.NodeCondition) bool) {
	t.Helper()
	var last []corev1.NodeCondition
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n.Status.Conditions
		byType := map[corev1.NodeConditionType]corev1.NodeCondition{}
		for _, c := range n.Status.Conditions {
			byType[c.Type] = c
		}
		return cond(byType), nil
	})
	if err != nil {
		t.Fatalf("node %s: %s: %v; conditions %+v", name, what, err, last)
	}
}

// TestCordonAndExternalTaintTriggers: with onUnschedulable Drain a node that
// someone cordons is drained, and uncordoning withdraws the request; with
// Ignore nothing happens. The cluster autoscaler's taint drains a node under
// the default external taints.
func TestCordonAndExternalTaintTriggers(t *testing.T) {
	e := startEnv(t)
	drainPool := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "cordon-drain", Count: 1, Labels: map[string]string{"pool": "cordon-drain"}})
	ignorePool := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "cordon-ignore", Count: 1, Labels: map[string]string{"pool": "cordon-ignore"}})
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cordon-drain"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cordon-drain"}},
		Triggers:     v1alpha1.Triggers{OnUnschedulable: "Drain"}}})
	for _, n := range append(drainPool, ignorePool...) {
		name := n
		t.Cleanup(func() {
			_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	}
	// Give the policy's informer a moment, then cordon both as kubectl would.
	waitPolicy(t, e, "cordon-drain", "governing its node", func(dp *v1alpha1.DrainPolicy) bool { return dp.Status.Nodes == 1 })
	for _, n := range []string{drainPool[0], ignorePool[0]} {
		updateNode(t, e, n, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	}
	nd := e.waitDrain(t, drainPool[0], "Drained for the cordon", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	if got := requesterNames(nd); len(got) != 1 || got[0] != v1alpha1.RequesterCordon {
		t.Errorf("requesters %v, want only %q", got, v1alpha1.RequesterCordon)
	}
	if err := e.cl.Get(context.Background(), types.NamespacedName{Name: ignorePool[0]}, &v1alpha1.NodeDrain{}); !apierrors.IsNotFound(err) {
		t.Errorf("a node cordoned under onUnschedulable Ignore got a NodeDrain (%v)", err)
	}
	updateNode(t, e, drainPool[0], func(n *corev1.Node) { n.Spec.Unschedulable = false })
	waitGone(t, e, drainPool[0])

	// The cluster autoscaler marks the ignore-pool node for deletion.
	updateNode(t, e, ignorePool[0], func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	})
	nd = e.waitDrain(t, ignorePool[0], "Drained for the autoscaler's taint", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	if got := requesterNames(nd); len(got) != 1 || got[0] != "external:ToBeDeletedByClusterAutoscaler" {
		t.Errorf("requesters %v, want only external:ToBeDeletedByClusterAutoscaler", got)
	}
	updateNode(t, e, ignorePool[0], withoutTaint("ToBeDeletedByClusterAutoscaler"))
	waitGone(t, e, ignorePool[0])
	// It was cordoned by "kubectl" before vacate came: it stays cordoned.
	if n := getNode(t, e, ignorePool[0]); !n.Spec.Unschedulable {
		t.Error("vacate uncordoned a node that someone else had cordoned")
	}
}

func getNode(t *testing.T, e *env, name string) *corev1.Node {
	t.Helper()
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNodeDeletionDrainsFirst: under onNodeDelete Drain a governed node
// carries vacate's finalizer; deleting it drains it first (its pods are
// evicted, respecting their PDB), then the node goes and its NodeDrain with
// it. A node under Orphan goes at once, and turning a policy to Orphan
// releases its nodes.
func TestNodeDeletionDrainsFirst(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: "delete"}
	held := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "del-held", Count: 1, Labels: map[string]string{testLabel: "delete", "pool": "del-held"}})
	testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "del-spare", Count: 1, Labels: sel})
	orphan := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "del-orphan", Count: 1})
	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "del-held"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "del-held"}},
		Triggers:     v1alpha1.Triggers{OnNodeDelete: "Drain"}}}
	create(t, e, policy)
	ns := testenv.Namespace(t, e.c)
	apiBehindPDB(t, e, ns, sel, 4, "1")
	target := held[0]
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	onTarget := len(podsOn(t, e, ns, target))
	if onTarget == 0 {
		t.Fatalf("no api pod landed on %s", target)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return controllerutil.ContainsFinalizer(getNode(t, e, target), v1alpha1.FinalizerDrain), nil
	})
	if err != nil {
		t.Fatalf("node %s never got the finalizer %s", target, v1alpha1.FinalizerDrain)
	}
	if controllerutil.ContainsFinalizer(getNode(t, e, orphan[0]), v1alpha1.FinalizerDrain) {
		t.Errorf("node %s under the default (Orphan) got the finalizer", orphan[0])
	}

	t.Logf("deleting %s with %d api pod(s) on it", target, onTarget)
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nd := e.waitDrain(t, target, "requested by the deletion", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		got := requesterNames(nd)
		return len(got) == 1 && got[0] == v1alpha1.RequesterDelete
	})
	if nd.Spec.Mode != v1alpha1.ModeDecommission {
		t.Errorf("a drain for a deleted node has mode %s, want Decommission", nd.Spec.Mode)
	}
	// The node stays until its pods are gone, then goes.
	var lastSeenWith int
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		lastSeenWith = len(podsOn(t, e, ns, target))
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s was never released; %d api pod(s) still on it", target, lastSeenWith)
	}
	if left := len(podsOn(t, e, ns, target)); left != 0 {
		t.Errorf("node %s is gone with %d api pod(s) still bound to it", target, left)
	}
	waitGone(t, e, target)

	// Orphan: deleted at once.
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, orphan[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.c.Client.CoreV1().Nodes().Get(ctx, orphan[0], metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("node %s under Orphan was not deleted at once", orphan[0])
	}

	// The policy turns to Orphan: its nodes' finalizers are released.
	later := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "del-later", Count: 1, Labels: map[string]string{"pool": "del-held"}})
	hasFinalizer := func(want bool) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			return controllerutil.ContainsFinalizer(getNode(t, e, later[0]), v1alpha1.FinalizerDrain) == want, nil
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, hasFinalizer(true)); err != nil {
		t.Fatalf("node %s never got the finalizer", later[0])
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
			return err
		}
		policy.Spec.Triggers.OnNodeDelete = "Orphan"
		return e.cl.Update(ctx, policy)
	}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, hasFinalizer(false)); err != nil {
		t.Errorf("node %s kept the finalizer after its policy turned to Orphan", later[0])
	}
}

// TestVacatePodsLeaveLast: on a draining node, a pod of vacate's own
// (app.kubernetes.io/part-of=vacate) is evicted only after the node's other
// pods: the API server's audit log shows its eviction after theirs.
func TestVacatePodsLeaveLast(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	pool := map[string]string{testLabel: "last"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "last", Count: 2, Labels: pool})
	target := nodes[0]
	ns := testenv.Namespace(t, e.c)
	if err := devcluster.WaitForServiceAccount(ctx, e.c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The pods start on the target (the other node is cordoned meanwhile);
	// their replacements may then land on the other node. (Changing the
	// pods' node selector instead would roll them out, racing the drain.)
	updateNode(t, e, nodes[1], func(n *corev1.Node) { n.Spec.Unschedulable = true })
	for _, name := range []string{"vacate-agent", "web"} {
		dep := devcluster.Deployment(ns, name, 2)
		dep.Spec.Template.Spec.NodeSelector = pool
		if name == "vacate-agent" {
			dep.Spec.Replicas = ptr.To(int32(1))
			dep.Spec.Template.Labels[drain.ComponentLabel] = drain.ComponentValue
		}
		if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.Everything(), 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	updateNode(t, e, nodes[1], func(n *corev1.Node) { n.Spec.Unschedulable = false })
	start := time.Now()
	create(t, e, testutil.NodeDrain(target, "", "cli:test"))
	e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })

	events, err := devcluster.ReadAudit(e.c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	var lastOther, vacatePod time.Time
	for _, ev := range events {
		if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Subresource != "eviction" || ev.ObjectRef.Namespace != ns ||
			!ev.Succeeded() || ev.Received.Before(start) {
			continue
		}
		if strings.HasPrefix(ev.ObjectRef.Name, "vacate-agent-") {
			vacatePod = ev.Received
		} else if ev.Received.After(lastOther) {
			lastOther = ev.Received
		}
	}
	if vacatePod.IsZero() || lastOther.IsZero() {
		t.Fatalf("audit log lacks the evictions (vacate's pod %v, others %v)", vacatePod, lastOther)
	}
	if !vacatePod.After(lastOther) {
		t.Errorf("vacate's own pod was evicted at %s, before the last other pod (%s)", vacatePod.Format(time.StampMicro), lastOther.Format(time.StampMicro))
	}
}

// TestMaintenancePlannedTrigger: under onMaintenancePlanned: Drain, the
// admin's tooling setting the node condition MaintenancePlanned=True (as
// Kubernetes 1.37 defines it) drains the node as requester "maintenance",
// which vacate's own node conditions then report (DrainInProgress False,
// Drained True, as `kubectl get node -o yaml` shows them); the condition
// turning False withdraws the request, and the node is given back with
// vacate's conditions removed. A node under a policy that leaves the
// trigger off (the default) is not drained.
func TestMaintenancePlannedTrigger(t *testing.T) {
	e := startEnv(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "maint", Count: 2, Labels: map[string]string{"pool": "maint"}})
	on, off := nodes[0], nodes[1]
	updateNode(t, e, on, func(n *corev1.Node) { n.Labels["maint"] = "drain" })
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "maint"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"maint": "drain"}},
		Triggers:     v1alpha1.Triggers{OnMaintenancePlanned: "Drain"}}})
	for _, n := range nodes {
		name := n
		t.Cleanup(func() {
			_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	}
	waitPolicy(t, e, "maint", "governing its node", func(dp *v1alpha1.DrainPolicy) bool { return dp.Status.Nodes == 1 })
	for _, n := range nodes {
		setMaintenancePlanned(t, e, n, corev1.ConditionTrue)
	}
	nd := e.waitDrain(t, on, "Drained for the planned maintenance", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	if got := requesterNames(nd); len(got) != 1 || got[0] != v1alpha1.RequesterMaintenance {
		t.Errorf("requesters %v, want only %q", got, v1alpha1.RequesterMaintenance)
	}
	if r := nd.Spec.Requesters[0].Reason; !strings.Contains(r, "MaintenancePlanned=True (KernelUpgrade): 6.12 rollout") {
		t.Errorf("the request's reason %q does not carry the condition's", r)
	}
	waitNodeConditions(t, e, on, "Drained True", func(c map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		return c[corev1.NodeDrained].Status == corev1.ConditionTrue && c[corev1.NodeDrainInProgress].Status == corev1.ConditionFalse
	})
	if err := e.cl.Get(context.Background(), types.NamespacedName{Name: off}, &v1alpha1.NodeDrain{}); !apierrors.IsNotFound(err) {
		t.Errorf("a node whose policy leaves the trigger off got a NodeDrain (%v)", err)
	}

	setMaintenancePlanned(t, e, on, corev1.ConditionFalse)
	waitGone(t, e, on)
	waitNodeConditions(t, e, on, "vacate's conditions removed", func(c map[corev1.NodeConditionType]corev1.NodeCondition) bool {
		_, inProgress := c[corev1.NodeDrainInProgress]
		_, drained := c[corev1.NodeDrained]
		return !inProgress && !drained && c[corev1.NodeMaintenancePlanned].Status == corev1.ConditionFalse
	})
	if n := getNode(t, e, on); n.Spec.Unschedulable {
		t.Error("the node stayed cordoned after the maintenance was no longer planned")
	}
}

// setMaintenancePlanned sets the node's condition MaintenancePlanned, as an
// admin's tooling would (a status patch).
func setMaintenancePlanned(t *testing.T, e *env, node string, status corev1.ConditionStatus) {
	t.Helper()
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"MaintenancePlanned","status":%q,"reason":"KernelUpgrade","message":"6.12 rollout","lastTransitionTime":%q}]}}`,
		status, time.Now().UTC().Format(time.RFC3339))
	if _, err := e.c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}
