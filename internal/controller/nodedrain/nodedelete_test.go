package nodedrain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/requests"
)

// deletePolicy creates a DrainPolicy with onNodeDelete: Drain for the nodes
// labelled pool=name, changed by tune, and waits until the given nodes carry
// vacate's node finalizer.
func deletePolicy(t *testing.T, e *env, name string, nodes []string, tune func(*v1alpha1.DrainPolicySpec)) {
	t.Helper()
	spec := v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}},
		Triggers:     v1alpha1.Triggers{OnNodeDelete: "Drain"},
	}
	if tune != nil {
		tune(&spec)
	}
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	for _, n := range nodes {
		err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return controllerutil.ContainsFinalizer(getNode(t, e, n), v1alpha1.FinalizerDrain), nil
		})
		if err != nil {
			t.Fatalf("node %s never got the finalizer %s", n, v1alpha1.FinalizerDrain)
		}
	}
}

// deleteNode deletes a node (vacate's finalizer holds it).
func deleteNode(t *testing.T, e *env, name string) {
	t.Helper()
	if err := e.c.Client.CoreV1().Nodes().Delete(testenv.Context(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitNodeGone waits until the node is deleted for good.
func waitNodeGone(t *testing.T, e *env, name, what string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := e.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("node %s was not released %s", name, what)
	}
}

// deletePod deletes a pod at once.
func deletePod(t *testing.T, e *env, ns, name string) {
	t.Helper()
	err := e.c.Client.CoreV1().Pods(ns).Delete(testenv.Context(t), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// TestNodeDeletionRaisesMode: a person's Maintenance drain (requester
// cli:x, as the CLI applies it) on a node under onNodeDelete: Drain becomes
// Decommission when the node is deleted: while it runs, and after it was
// Drained (it runs again). The node is released only once the drain is
// Drained in Decommission; the person's later cancel, from the drain as
// they read it before the raise, restates Decommission and succeeds.
func TestNodeDeletionRaisesMode(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "raise", Count: 2, Labels: map[string]string{"pool": "nd-raise"}})
	running, drained := nodes[0], nodes[1]
	for _, n := range nodes {
		name := n
		t.Cleanup(func() {
			_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	}
	deletePolicy(t, e, "nd-raise", nodes, func(s *v1alpha1.DrainPolicySpec) {
		s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromInt32(2)) // both drains at once
	})
	ns := testenv.Namespace(t, e.c)
	if err := devcluster.WaitForServiceAccount(ctx, e.c.Client, ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	// An unmanaged pod blocks the drain (the policy's default) until the
	// test deletes it.
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "loner", running), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := requests.Apply(ctx, e.cl, n, v1alpha1.Requester{Name: "cli:x", Reason: "kernel upgrade"}, v1alpha1.ModeMaintenance, ""); err != nil {
			t.Fatal(err)
		}
	}
	before := e.waitDrain(t, running, "blocked by the unmanaged pod", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Blocked > 0 })
	beforeDrained := e.waitDrain(t, drained, "Drained in Maintenance", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	if before.Spec.Mode != v1alpha1.ModeMaintenance || beforeDrained.Spec.Mode != v1alpha1.ModeMaintenance {
		t.Fatalf("modes before the deletion: %s, %s; want Maintenance", before.Spec.Mode, beforeDrained.Spec.Mode)
	}

	t.Log("a running Maintenance drain: the node is deleted")
	deleteNode(t, e, running)
	e.waitDrain(t, running, "raised to Decommission by the deletion", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Spec.Mode == v1alpha1.ModeDecommission && requests.Index(nd, v1alpha1.RequesterDelete) >= 0 && requests.Index(nd, "cli:x") >= 0
	})

	t.Log("a Drained Maintenance drain: a pod arrives (bound by name, past the cordon), then the node is deleted")
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, devcluster.BarePod(ns, "late", drained), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteNode(t, e, drained)
	e.waitDrain(t, drained, "raised to Decommission and running again", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Spec.Mode == v1alpha1.ModeDecommission && nd.Status.Phase != v1alpha1.PhaseDrained && nd.Status.Blocked > 0
	})
	for _, n := range nodes {
		if _, err := e.c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil {
			t.Fatalf("node %s was released before its Decommission drain was Drained: %v", n, err)
		}
	}

	t.Log("the blocking pods go: both drains finish in Decommission, then the nodes are released")
	deletePod(t, e, ns, "loner")
	deletePod(t, e, ns, "late")
	for _, n := range nodes {
		waitNodeGone(t, e, n, "after its Decommission drain was Drained", time.Minute)
		nd := e.waitDrain(t, n, "Drained in Decommission", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
			return nd.Status.Phase == v1alpha1.PhaseDrained && nd.Status.Mode == v1alpha1.ModeDecommission
		})
		if nd.Spec.Mode != v1alpha1.ModeDecommission {
			t.Errorf("NodeDrain %s has mode %s after its node was deleted, want Decommission", n, nd.Spec.Mode)
		}
	}

	t.Log("the person cancels, from the drain as read before the raise")
	for _, stale := range []*v1alpha1.NodeDrain{before, beforeDrained} {
		after, err := requests.Withdraw(ctx, e.cl, stale.DeepCopy(), "cli:x")
		if err != nil {
			t.Fatalf("withdrawing cli:x from %s: %v", stale.Name, err)
		}
		if after.Spec.Mode != v1alpha1.ModeDecommission {
			t.Errorf("withdrawing cli:x left %s in mode %s, want Decommission", stale.Name, after.Spec.Mode)
		}
		if _, err := requests.DeleteIfIdle(ctx, e.cl, after); err != nil {
			t.Fatal(err)
		}
		waitGone(t, e, stale.Name)
	}
}

// TestNodeDeletionBounded: a deleted node whose drain can never finish (a
// PDB that allows no disruption) is released when its policy's
// timeouts.nodeDeletion passes, with a Warning event on the node and
// vacate_node_deletion_timeouts_total counted once.
func TestNodeDeletionBounded(t *testing.T) {
	e := startEnv(t)
	pool := map[string]string{"pool": "nd-bound"}
	target := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "bound", Count: 1, Labels: pool})[0]
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	deletePolicy(t, e, "nd-bound", []string{target}, func(s *v1alpha1.DrainPolicySpec) {
		s.Timeouts.NodeDeletion = &metav1.Duration{Duration: 5 * time.Second}
	})
	ns := testenv.Namespace(t, e.c)
	apiBehindPDB(t, e, ns, pool, 2, "0")
	counted := promtest.ToFloat64(metrics.NodeDeletionTimeouts)

	deleteNode(t, e, target)
	e.waitDrain(t, target, "blocked by the PDB", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Blocked > 0 })
	waitNodeGone(t, e, target, "when timeouts.nodeDeletion passed", time.Minute)

	waitNodeEvent(t, e, target, corev1.EventTypeWarning, v1alpha1.EventNodeDeletionTimeout, "blocked")
	if got := promtest.ToFloat64(metrics.NodeDeletionTimeouts) - counted; got != 1 {
		t.Errorf("vacate_node_deletion_timeouts_total went up by %v, want 1", got)
	}
}

// TestNodeDeletionBoundedUnderAmbiguousPolicy: a deleted node whose policy
// became ambiguous (a second DrainPolicy selects it; nothing is drained and
// no NodeDrain is made) is still released, when the longest bound of the
// policies that select it passes.
func TestNodeDeletionBoundedUnderAmbiguousPolicy(t *testing.T) {
	e := startEnv(t)
	target := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "unclear", Count: 1, Labels: map[string]string{"pool": "nd-unclear", "nd-unclear-too": "yes"}})[0]
	deletePolicy(t, e, "nd-unclear", []string{target}, func(s *v1alpha1.DrainPolicySpec) {
		s.Timeouts.NodeDeletion = &metav1.Duration{Duration: 2 * time.Second}
	})
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nd-unclear-too"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"nd-unclear-too": "yes"}},
		Timeouts:     v1alpha1.Timeouts{NodeDeletion: &metav1.Duration{Duration: 4 * time.Second}},
	}})
	waitPolicy(t, e, "nd-unclear-too", "reported overlapping", func(dp *v1alpha1.DrainPolicy) bool {
		return meta.IsStatusConditionTrue(dp.Status.Conditions, v1alpha1.ConditionOverlapping)
	})
	counted := promtest.ToFloat64(metrics.NodeDeletionTimeouts)

	deleteNode(t, e, target)
	waitNodeGone(t, e, target, "when the longest timeouts.nodeDeletion passed", time.Minute)
	waitNodeEvent(t, e, target, corev1.EventTypeWarning, v1alpha1.EventNodeDeletionTimeout, "4s")
	if got := promtest.ToFloat64(metrics.NodeDeletionTimeouts) - counted; got != 1 {
		t.Errorf("vacate_node_deletion_timeouts_total went up by %v, want 1", got)
	}
	if err := e.cl.Get(testenv.Context(t), types.NamespacedName{Name: target}, &v1alpha1.NodeDrain{}); !apierrors.IsNotFound(err) {
		t.Errorf("a NodeDrain was made for a node under an ambiguous policy (%v)", err)
	}
}

// waitNodeEvent waits for an event of the type and reason on the node whose
// message contains want.
func waitNodeEvent(t *testing.T, e *env, node, typ, reason, want string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(testenv.Context(t), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
		if err != nil {
			return false, nil
		}
		seen = nil
		for _, ev := range list.Items {
			seen = append(seen, ev.Type+" "+ev.Reason+": "+ev.Message)
			if ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Message, want) {
				t.Logf("event: %s", ev.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s %s event saying %q on node %s; events: %v", typ, reason, want, node, seen)
	}
}

// TestNodeDeletionIgnoresWindows: a node deleted outside its policy's
// maintenance window is drained at once (a deleted node cannot wait for
// the window), and the Admitted condition says why.
func TestNodeDeletionIgnoresWindows(t *testing.T) {
	e := startEnv(t)
	pool := map[string]string{"pool": "nd-window"}
	target := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "window", Count: 1, Labels: pool})[0]
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	// The window opens two hours from now (UTC): it is closed now.
	opens := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	win := v1alpha1.MaintenanceWindow{
		Days:  []v1alpha1.Weekday{v1alpha1.Weekday(opens.Weekday().String()[:3])},
		Start: opens.Format("15:04"), End: opens.Add(time.Hour).Format("15:04"),
	}
	deletePolicy(t, e, "nd-window", []string{target}, func(s *v1alpha1.DrainPolicySpec) {
		s.Schedule = &v1alpha1.Schedule{TimeZone: "UTC", Windows: []v1alpha1.MaintenanceWindow{win}}
	})
	ns := testenv.Namespace(t, e.c)
	apiBehindPDB(t, e, ns, pool, 1, "1") // its replacement has nowhere to go: one pod, so the PDB allows its eviction

	deleteNode(t, e, target)
	nd := e.waitDrain(t, target, "admitted outside the window", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
	})
	msg := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted).Message
	t.Logf("Admitted=True: %s", msg)
	if !strings.Contains(msg, "maintenance windows") {
		t.Errorf("the Admitted message does not say the maintenance windows were skipped: %s", msg)
	}
	waitNodeGone(t, e, target, "after its drain", time.Minute)
	if left := len(podsOn(t, e, ns, target)); left != 0 {
		t.Errorf("node %s is gone with %d api pod(s) still bound to it", target, left)
	}
}
