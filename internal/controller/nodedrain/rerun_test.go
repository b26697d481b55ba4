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
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/requests"
)

// Issue 23, item 1: a drain that ended runs again when what it is asked
// changes, and a Drained node is kept empty while anyone asks.

// poolPolicy creates a DrainPolicy named name for the nodes labelled
// pool=name, changed by tune.
func poolPolicy(t *testing.T, e *env, name string, tune func(*v1alpha1.DrainPolicySpec)) {
	t.Helper()
	spec := v1alpha1.DrainPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}}}
	spec.Concurrency.MaxParallelNodes = ptr.To(intstr.FromInt32(4))
	if tune != nil {
		tune(&spec)
	}
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
}

// updatePolicy changes a DrainPolicy (the policy controller writes its
// status: update the latest copy).
func updatePolicy(t *testing.T, e *env, name string, change func(*v1alpha1.DrainPolicySpec)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dp := &v1alpha1.DrainPolicy{}
		if err := e.cl.Get(testenv.Context(t), types.NamespacedName{Name: name}, dp); err != nil {
			return err
		}
		change(&dp.Spec)
		return e.cl.Update(testenv.Context(t), dp)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// join adds a requester to the node's drain as vacate-agent would.
func join(t *testing.T, e *env, node string, r v1alpha1.Requester) {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(testenv.Context(t), types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	if err := requests.Apply(testenv.Context(t), e.cl, node, r, nd.Spec.Mode, nd.Spec.PolicyName); err != nil {
		t.Fatal(err)
	}
}

func phaseIs(p v1alpha1.DrainPhase) func(*v1alpha1.NodeDrain) bool {
	return func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == p && nd.Status.ObservedGeneration == nd.Generation
	}
}

// runningAgain: the drain runs again for reason, and says so.
func runningAgain(reason string) func(*v1alpha1.NodeDrain) bool {
	return func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionDrained)
		return nd.Status.Run != nil && nd.Status.Run.Reason == reason && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason
	}
}

// TestFailedDrainRunsAgain: a drain that Failed (timeouts.drain, a bare pod
// in the way) stays Failed while nothing changes, and runs again, through
// admission and with its timeouts counted anew, when a requester joins (an
// agent's notice on a node whose drain Failed earlier) and when a
// requester's deadline changes.
func TestFailedDrainRunsAgain(t *testing.T) {
	e := startEnv(t)
	pool := "rerun-failed"
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: pool, Count: 2, Labels: map[string]string{"pool": pool}})
	poolPolicy(t, e, pool, func(s *v1alpha1.DrainPolicySpec) { s.Timeouts.Drain = &metav1.Duration{Duration: 2 * time.Second} })
	ns := testenv.Namespace(t, e.c)
	joined, moved := nodes[0], nodes[1]
	for _, n := range nodes {
		barePod(t, e, ns, "loner-"+n, n, nil)
	}
	requestAll(t, e, []string{joined})
	spot := v1alpha1.Requester{Name: "agent:aws-spot", Reason: "spot interruption", Deadline: &metav1.Time{Time: time.Now().Add(time.Hour).Truncate(time.Second)}}
	if err := requests.Apply(testenv.Context(t), e.cl, moved, spot, "", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: moved}})
	})
	for _, n := range nodes {
		failed := e.waitDrain(t, n, "Failed by timeouts.drain", time.Minute, phaseIs(v1alpha1.PhaseFailed))
		if c := meta.FindStatusCondition(failed.Status.Conditions, v1alpha1.ConditionDrained); c == nil || c.Reason != v1alpha1.ReasonDrainTimeout {
			t.Fatalf("drain %s Failed with %+v, want reason %s", n, c, v1alpha1.ReasonDrainTimeout)
		}
	}

	t.Log("what holds the drains goes, and the policy gives them time: the Failed drains stay Failed")
	for _, n := range nodes {
		deletePod(t, e, ns, "loner-"+n)
	}
	updatePolicy(t, e, pool, func(s *v1alpha1.DrainPolicySpec) { s.Timeouts.Drain = &metav1.Duration{Duration: 10 * time.Minute} })
	time.Sleep(2 * time.Second) // passes of the drains (pod deletions, the policy) come and go
	for _, n := range nodes {
		e.waitDrain(t, n, "still Failed", time.Second, phaseIs(v1alpha1.PhaseFailed))
	}

	t.Log("an agent's notice joins the first drain: it runs again and is Drained")
	join(t, e, joined, v1alpha1.Requester{Name: "agent:shutdown", Reason: "reboot"})
	e.waitDrain(t, joined, "running again for the new requester", 30*time.Second, runningAgain(v1alpha1.ReasonRequesterAdded))
	nd := e.waitDrain(t, joined, "Drained after running again", time.Minute, phaseIs(v1alpha1.PhaseDrained))
	if nd.Status.Run == nil || !strings.Contains(nd.Status.Run.Message, "agent:shutdown joined") || len(nd.Status.Run.Requesters) != 2 {
		t.Errorf("status.run = %+v, want the RequesterAdded run naming agent:shutdown, answering both requesters", nd.Status.Run)
	}
	waitEvents(t, e, joined, v1alpha1.EventRunningAgain)

	t.Log("the agent's deadline on the second drain moves: it runs again and is Drained")
	spot.Deadline = &metav1.Time{Time: spot.Deadline.Add(time.Hour)}
	join(t, e, moved, spot)
	e.waitDrain(t, moved, "running again for the new deadline", 30*time.Second, runningAgain(v1alpha1.ReasonDeadlineChanged))
	e.waitDrain(t, moved, "Drained after running again", time.Minute, phaseIs(v1alpha1.PhaseDrained))
}

// TestDrainedNodeKeptEmpty: a Drained drain keeps its node empty while it is
// requested: a requester that joins while the node is empty is answered at
// once (still Drained, for the current generation); a pod bound to the
// node by name afterwards runs the drain again, is evicted, and the drain
// is Drained again.
func TestDrainedNodeKeptEmpty(t *testing.T) {
	e := startEnv(t)
	pool := "rerun-drained"
	node := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: pool, Count: 1, Labels: map[string]string{"pool": pool}})[0]
	poolPolicy(t, e, pool, func(s *v1alpha1.DrainPolicySpec) { s.Pods.Unmanaged = "Delete" })
	ns := testenv.Namespace(t, e.c)
	requestAll(t, e, []string{node})
	e.waitDrain(t, node, "Drained", time.Minute, phaseIs(v1alpha1.PhaseDrained))

	t.Log("a reboot notice joins the Drained drain of an empty node: Drained at once")
	join(t, e, node, v1alpha1.Requester{Name: "agent:shutdown", Reason: "reboot"})
	nd := e.waitDrain(t, node, "Drained for the new requester", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return phaseIs(v1alpha1.PhaseDrained)(nd) && requests.Index(nd, "agent:shutdown") >= 0
	})
	if nd.Status.Run == nil || len(nd.Status.Run.Requesters) != 2 || nd.Status.Run.Reason != "" {
		t.Errorf("status.run = %+v, want the first run, answering both requesters", nd.Status.Run)
	}

	t.Log("a pod is bound to the Drained node by name: the drain runs again and evicts it")
	barePod(t, e, ns, "late", node, nil)
	e.waitDrain(t, node, "running again for the pod", 30*time.Second, runningAgain(v1alpha1.ReasonPodsArrived))
	nd = e.waitDrain(t, node, "Drained again", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return phaseIs(v1alpha1.PhaseDrained)(nd) && nd.Status.Evicted >= 1
	})
	if _, err := e.c.Client.CoreV1().Pods(ns).Get(testenv.Context(t), "late", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod late is still there after the drain ran again (%v)", err)
	}
	if nd.Status.Run == nil || !strings.Contains(nd.Status.Run.Message, ns+"/late") {
		t.Errorf("status.run = %+v, want the PodsArrived run naming %s/late", nd.Status.Run, ns)
	}
}

// TestFailedMaintenanceDrainDecommissionedOnNodeDeletion: a node whose
// Maintenance drain Failed is deleted: the drain is raised to Decommission
// and runs again, every Decommission provider is asked (one that takes no
// part in Maintenance, and protects no pod there), and the node finalizer
// holds the node until that Evacuation is Completed and the drain Drained.
func TestFailedMaintenanceDrainDecommissionedOnNodeDeletion(t *testing.T) {
	e := startEnv(t)
	pool := "rerun-delete"
	node := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: pool, Count: 1, Labels: map[string]string{"pool": pool}})[0]
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	deletePolicy(t, e, pool, []string{node}, func(s *v1alpha1.DrainPolicySpec) {
		s.Timeouts.Drain = &metav1.Duration{Duration: 2 * time.Second}
	})
	archive := provider("rerun-archive", v1alpha1.StageBeforeEviction, time.Minute, "rerun-archive")
	archive.Spec.Modes = []v1alpha1.DrainMode{v1alpha1.ModeDecommission}
	create(t, e, archive)
	ns := testenv.Namespace(t, e.c)
	barePod(t, e, ns, "loner", node, nil)
	if err := requests.Apply(testenv.Context(t), e.cl, node, v1alpha1.Requester{Name: "cli:x", Reason: "kernel upgrade"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, node, "Failed in Maintenance", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return phaseIs(v1alpha1.PhaseFailed)(nd) && nd.Status.Mode == v1alpha1.ModeMaintenance
	})
	evName := v1alpha1.EvacuationName(node, archive.Name)
	if _, err := getEvacuation(t, e, evName); !apierrors.IsNotFound(err) {
		t.Fatalf("a Maintenance drain asked the Decommission-only provider (%v)", err)
	}

	t.Log("the node is deleted; the pod goes and the policy gives the drain time")
	updatePolicy(t, e, pool, func(s *v1alpha1.DrainPolicySpec) { s.Timeouts.Drain = &metav1.Duration{Duration: 10 * time.Minute} })
	deletePod(t, e, ns, "loner")
	deleteNode(t, e, node)
	e.waitDrain(t, node, "raised to Decommission and running again", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Spec.Mode == v1alpha1.ModeDecommission && runningAgain(v1alpha1.ReasonModeRaised)(nd)
	})
	var ev *v1alpha1.Evacuation
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		ev, err = getEvacuation(t, e, evName)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the Decommission provider was never asked (no Evacuation %s)", evName)
	}
	if ev.Spec.Mode != v1alpha1.ModeDecommission {
		t.Errorf("Evacuation %s asks mode %s, want Decommission", evName, ev.Spec.Mode)
	}
	time.Sleep(time.Second)
	if _, err := e.c.Client.CoreV1().Nodes().Get(testenv.Context(t), node, metav1.GetOptions{}); err != nil {
		t.Fatalf("the node was released before its Decommission provider finished: %v", err)
	}

	t.Log("the provider completes: the drain is Drained in Decommission and the node released")
	completeEvacuation(t, e, evName)
	waitNodeGone(t, e, node, "once its Decommission drain was Drained", time.Minute)
	e.waitDrain(t, node, "Drained in Decommission", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained && nd.Status.Mode == v1alpha1.ModeDecommission
	})
}

// completeEvacuation answers an Evacuation's current generation Completed,
// as its provider would.
func completeEvacuation(t *testing.T, e *env, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ev, err := getEvacuation(t, e, name)
		if err != nil {
			return err
		}
		patch := client.MergeFromWithOptions(ev.DeepCopy(), client.MergeFromWithOptimisticLock{})
		ev.Status = v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationCompleted, Message: "done by the test",
			ObservedGeneration: ev.Generation, HeartbeatTime: &metav1.Time{Time: time.Now()}}
		return e.cl.Status().Patch(testenv.Context(t), ev, patch)
	})
	if err != nil {
		t.Fatalf("completing Evacuation %s: %v", name, err)
	}
}

// TestDeadlinePassedBeforeStartIsAdmittedFirst (item 2): under onTimeout
// Fail, a drain whose deadline passes while it waits for a slot is not
// failed with nothing evicted: it waits, first in the queue (ahead of a
// drain requested before it), and drains once a slot frees.
func TestDeadlinePassedBeforeStartIsAdmittedFirst(t *testing.T) {
	e := startEnv(t)
	pool := "deadline-queue"
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: pool, Count: 3, Labels: map[string]string{"pool": pool}})
	poolPolicy(t, e, pool, func(s *v1alpha1.DrainPolicySpec) {
		s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromInt32(1))
		s.Concurrency.BatchWindow = &metav1.Duration{}
	})
	ns := testenv.Namespace(t, e.c)
	running, earlier, late := nodes[0], nodes[1], nodes[2]
	barePod(t, e, ns, "loner", running, nil)
	requestAll(t, e, []string{running})
	e.waitDrain(t, running, "admitted and blocked by the bare pod", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Blocked > 0 })
	requestAll(t, e, []string{earlier})
	e.waitDrain(t, earlier, "queued", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.QueuePosition == 1 })
	deadline := time.Now().Add(2 * time.Second).Truncate(time.Second)
	if err := requests.Apply(testenv.Context(t), e.cl, late, v1alpha1.Requester{Name: "agent:aws-spot", Reason: "spot interruption",
		Deadline: &metav1.Time{Time: deadline}}, "", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: late}})
	})
	time.Sleep(time.Until(deadline) + 2*time.Second)
	nd := e.waitDrain(t, late, "queued first, past its deadline", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.QueuePosition == 1 || nd.Status.Phase == v1alpha1.PhaseFailed
	})
	if nd.Status.Phase == v1alpha1.PhaseFailed {
		t.Fatalf("the drain whose deadline passed while it waited Failed: %s", testenv.DescribeDrain(nd))
	}
	e.waitDrain(t, earlier, "second in the queue, behind the drain past its deadline", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.QueuePosition == 2
	})

	t.Log("the running drain ends: both queued drains are Drained")
	deletePod(t, e, ns, "loner")
	e.waitDrain(t, late, "Drained", time.Minute, phaseIs(v1alpha1.PhaseDrained))
	e.waitDrain(t, earlier, "Drained", time.Minute, phaseIs(v1alpha1.PhaseDrained))
}

// TestDaemonSetsEvictEnds (item 6): under pods.daemonSets Evict the drain
// ends: the node is tainted so that the DaemonSet puts no pod back, the
// drain is Drained, and the undo removes exactly that taint; the DaemonSet's
// pod comes back.
func TestDaemonSetsEvictEnds(t *testing.T) {
	e := startEnv(t)
	pool := "ds-evict"
	node := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: pool, Count: 1, Labels: map[string]string{"pool": pool}})[0]
	poolPolicy(t, e, pool, func(s *v1alpha1.DrainPolicySpec) { s.Pods.DaemonSets = "Evict" })
	ns := testenv.Namespace(t, e.c)
	ds := devcluster.DaemonSet(ns, "logs")
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"pool": pool}
	if _, err := e.c.Client.AppsV1().DaemonSets(ns).Create(testenv.Context(t), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDaemonPod(t, e, node, true)
	requestAll(t, e, []string{node})
	nd := e.waitDrain(t, node, "Drained", time.Minute, phaseIs(v1alpha1.PhaseDrained))
	waitDaemonPod(t, e, node, false)
	n, err := e.c.Client.CoreV1().Nodes().Get(testenv.Context(t), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.Taint{Key: v1alpha1.TaintDaemonSetsOff, Value: string(nd.UID), Effect: corev1.TaintEffectNoSchedule}
	found := false
	for _, tn := range n.Spec.Taints {
		found = found || (tn.Key == want.Key && tn.Value == want.Value && tn.Effect == want.Effect)
	}
	if !found {
		t.Errorf("node %s taints %v, want %v", node, n.Spec.Taints, want)
	}
	time.Sleep(2 * time.Second)
	if pods := daemonPods(t, e, node); len(pods) > 0 {
		t.Errorf("the DaemonSet put a pod back on the Drained node: %v", pods)
	}

	t.Log("the drain is cancelled: the taint goes, and the DaemonSet's pod comes back")
	cancelDrain(t, e, node, time.Minute)
	n, err = e.c.Client.CoreV1().Nodes().Get(testenv.Context(t), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range n.Spec.Taints {
		if tn.Key == v1alpha1.TaintDaemonSetsOff {
			t.Errorf("taint %v left on node %s after the undo", tn, node)
		}
	}
	waitDaemonPod(t, e, node, true)
}

func daemonPods(t *testing.T, e *env, node string) []string {
	t.Helper()
	var out []string
	for _, p := range testenv.PodsOnNode(t, e.c, node) {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" && p.DeletionTimestamp.IsZero() {
			out = append(out, p.Name)
		}
	}
	return out
}

func waitDaemonPod(t *testing.T, e *env, node string, there bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return (len(daemonPods(t, e, node)) > 0) == there, nil
	})
	if err != nil {
		t.Fatalf("DaemonSet pod on %s: want there=%t, have %v", node, there, daemonPods(t, e, node))
	}
}
