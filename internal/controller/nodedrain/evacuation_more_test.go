package nodedrain_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// evacScene starts the controller, makes count simulated nodes named
// prefix-N and a namespace, and runs one single-replica Deployment per
// apps entry pinned to the node it names (its replacement cannot land
// elsewhere, so a pod that leaves the node is gone from it for good).
func evacScene(t *testing.T, prefix string, count int, apps map[string]int) (*env, string, []string) {
	t.Helper()
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix, Count: count, Labels: map[string]string{"pool": prefix}})
	ns := testenv.Namespace(t, e.c)
	for app, i := range apps {
		d := devcluster.Deployment(ns, app, 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: nodes[i]}
		if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.Everything(), len(apps), time.Minute); err != nil {
		t.Fatal(err)
	}
	return e, ns, nodes
}

// appPod returns the pod of app on node, if one is there.
func appPod(t *testing.T, e *env, node, app string) (corev1.Pod, bool) {
	t.Helper()
	for _, p := range testenv.PodsOnNode(t, e.c, node) {
		if p.Labels[devcluster.AppLabel] == app {
			return p, true
		}
	}
	return corev1.Pod{}, false
}

func provider(name string, stage v1alpha1.EvacuationStage, timeout time.Duration, apps ...string) *v1alpha1.EvacuationProvider {
	return &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: devcluster.AppLabel, Operator: metav1.LabelSelectorOpIn, Values: apps}}},
		Stage:   stage,
		Timeout: &metav1.Duration{Duration: timeout},
	}}
}

func getEvacuation(t *testing.T, e *env, name string) (*v1alpha1.Evacuation, error) {
	t.Helper()
	ev := &v1alpha1.Evacuation{}
	return ev, e.cl.Get(context.Background(), types.NamespacedName{Name: name}, ev)
}

// cancelDrain deletes the node's NodeDrain and returns how long it took
// vacate to undo and release it.
func cancelDrain(t *testing.T, e *env, node string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		nd := &v1alpha1.NodeDrain{}
		_ = e.cl.Get(context.Background(), types.NamespacedName{Name: node}, nd)
		t.Fatalf("NodeDrain %s not released within %s of the cancel; last status: %s", node, within, testenv.DescribeDrain(nd))
	}
	return time.Since(start)
}

// TestEvacuationAfterEviction: an AfterEviction provider does not hold the
// pods it protects: they are evicted at once, and it is the node's Drained
// that waits for the evacuation (phase Evacuating, Evacuated=False saying
// so) until the provider reports Completed.
func TestEvacuationAfterEviction(t *testing.T) {
	e, _, nodes := evacScene(t, "evafter", 1, map[string]int{"afterstore": 0})
	target := nodes[0]
	create(t, e, provider("after-store", v1alpha1.StageAfterEviction, 5*time.Second, "afterstore"))
	store := &slowStore{}
	runProvider(t, e.c, "after-store", store)
	evName := v1alpha1.EvacuationName(target, "after-store")

	requestAll(t, e, []string{target})
	t.Log("the protected pod leaves while its evacuation is still InProgress")
	nd := e.waitDrain(t, target, "pods gone, waiting for the AfterEviction evacuation", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionEvacuated)
		return nd.Status.Phase == v1alpha1.PhaseEvacuating && nd.Status.Remaining == 0 && nd.Status.Evicted == 1 &&
			c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonWaitingAfterEvict &&
			strings.Contains(c.Message, "waiting for the evacuations after eviction: "+evName+": InProgress: copying replicas off "+target) &&
			len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Name == evName && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationInProgress)
	})
	t.Logf("waiting after eviction: %s", testenv.DescribeDrain(nd))
	if p, ok := appPod(t, e, target, "afterstore"); ok {
		t.Errorf("pod %s still on %s although its provider runs after eviction", p.Name, target)
	}
	if ev, err := getEvacuation(t, e, evName); err != nil || ev.Status.Phase == v1alpha1.EvacuationCompleted {
		t.Fatalf("Evacuation %s should be there and not Completed yet: phase %q (%v)", evName, ev.Status.Phase, err)
	}

	t.Log("the drain is not Drained while the provider works")
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		nd := &v1alpha1.NodeDrain{}
		if err := e.cl.Get(context.Background(), types.NamespacedName{Name: target}, nd); err != nil {
			t.Fatal(err)
		}
		if nd.Status.Phase != v1alpha1.PhaseEvacuating || meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionDrained) {
			t.Fatalf("the drain moved on before its AfterEviction evacuation Completed: %s", testenv.DescribeDrain(nd))
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Log("the provider finishes: the node is Drained")
	store.release.Store(true)
	nd = e.waitDrain(t, target, "Drained", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if !meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionEvacuated) {
		t.Errorf("Drained but Evacuated is not True: %s", testenv.DescribeDrain(nd))
	}
	if ev, err := getEvacuation(t, e, evName); err != nil || ev.Status.Phase != v1alpha1.EvacuationCompleted {
		t.Errorf("Drained while Evacuation %s is %q (%v)", evName, ev.Status.Phase, err)
	}
	took := cancelDrain(t, e, target, 20*time.Second)
	t.Logf("cancelled and released in %s", took.Round(time.Millisecond))
	if store.cancelled.Load() == 0 {
		t.Error("the provider was not asked to cancel on undo")
	}
}

// failingStore fails (evacuation.Failed) until fixed.
type failingStore struct {
	broken atomic.Bool
	calls  atomic.Int64
}

func (s *failingStore) Evacuate(context.Context, string, v1alpha1.DrainMode) (evacuation.Progress, error) {
	s.calls.Add(1)
	if s.broken.Load() {
		return evacuation.Progress{Remaining: 7}, evacuation.Failed(errors.New("replica r-7 has no healthy peer to copy to"))
	}
	return evacuation.Progress{Done: true, Message: "every replica has a copy elsewhere"}, nil
}

func (s *failingStore) Cancel(context.Context, string) (evacuation.Progress, error) {
	return evacuation.Progress{Done: true}, nil
}

// TestEvacuationFailedHoldsThenResumes: a provider whose evacuation fails
// holds its pod with "provider X failed: <why>" (never taken as done); the
// Runner retries at each heartbeat, and once the cause is fixed the
// evacuation Completes and the drain finishes.
func TestEvacuationFailedHoldsThenResumes(t *testing.T) {
	e, ns, nodes := evacScene(t, "evfail", 1, map[string]int{"failstore": 0})
	target := nodes[0]
	create(t, e, provider("failed-store", v1alpha1.StageBeforeEviction, 5*time.Second, "failstore"))
	store := &failingStore{}
	store.broken.Store(true)
	runProvider(t, e.c, "failed-store", store)
	check := guardProtected(t, e, ns, "failstore", target, "failed-store")
	evName := v1alpha1.EvacuationName(target, "failed-store")

	requestAll(t, e, []string{target})
	want := "provider failed-store failed: replica r-7 has no healthy peer to copy to"
	nd := e.waitDrain(t, target, "holding the pod of a failed evacuation", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		held := slices.ContainsFunc(nd.Status.Blockers, func(b v1alpha1.Blocker) bool {
			return b.Reason == v1alpha1.BlockerEvacuation && strings.HasPrefix(b.Pod, ns+"/failstore-") &&
				b.Holder == "Evacuation "+evName && b.Detail == want
		})
		return held && nd.Status.Phase == v1alpha1.PhaseEvacuating && len(nd.Status.Hooks) == 1 &&
			nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationFailed) && nd.Status.Hooks[0].Message == want &&
			meta.IsStatusConditionFalse(nd.Status.Conditions, v1alpha1.ConditionEvacuated)
	})
	t.Logf("failed: %s", testenv.DescribeDrain(nd))
	calls := store.calls.Load()
	time.Sleep(time.Second) // a few heartbeats
	if p, ok := appPod(t, e, target, "failstore"); !ok || p.DeletionTimestamp != nil {
		t.Fatalf("the pod of a Failed evacuation left the node")
	}
	if store.calls.Load() <= calls {
		t.Errorf("the Runner did not retry a Failed evacuation at its heartbeat (%d calls before, %d after)", calls, store.calls.Load())
	}

	t.Log("the cause is fixed: the evacuation Completes and the pod goes")
	store.broken.Store(false)
	e.waitDrain(t, target, "Drained", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	check()
	cancelDrain(t, e, target, 20*time.Second)
}

// recordingStore completes at once and records the nodes it was asked about.
type recordingStore struct {
	mu    sync.Mutex
	asked []string
}

func (s *recordingStore) Evacuate(_ context.Context, node string, _ v1alpha1.DrainMode) (evacuation.Progress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, node)
	return evacuation.Progress{Done: true}, nil
}

func (s *recordingStore) Cancel(context.Context, string) (evacuation.Progress, error) {
	return evacuation.Progress{Done: true}, nil
}

func (s *recordingStore) wasAsked(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.asked, node)
}

// TestEvacuationProviderModes: a provider that takes part only in
// Decommission drains is not asked (no Evacuation) when its pod's node is
// drained for Maintenance, and the pod is evicted as usual; the same
// provider is asked for a Decommission drain of another node.
func TestEvacuationProviderModes(t *testing.T) {
	e, _, nodes := evacScene(t, "evmodes", 2, map[string]int{"modestore-m": 0, "modestore-d": 1})
	maint, decom := nodes[0], nodes[1]
	p := provider("modes-store", v1alpha1.StageBeforeEviction, 5*time.Second, "modestore-m", "modestore-d")
	p.Spec.Modes = []v1alpha1.DrainMode{v1alpha1.ModeDecommission}
	create(t, e, p)
	store := &recordingStore{}
	runProvider(t, e.c, "modes-store", store)

	requestAll(t, e, []string{maint})
	ctx := testenv.Context(t)
	if err := requests.Apply(ctx, e.cl, decom, v1alpha1.Requester{Name: "cli:test", Reason: "retire"}, v1alpha1.ModeDecommission, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: decom}})
	})

	nd := e.waitDrain(t, maint, "Drained (Maintenance)", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionEvacuated); c == nil || c.Reason != v1alpha1.ReasonNoEvacuations || len(nd.Status.Hooks) != 0 {
		t.Errorf("Maintenance drain reports an evacuation by a Decommission-only provider: %s; hooks %+v", testenv.DescribeDrain(nd), nd.Status.Hooks)
	}
	if _, err := getEvacuation(t, e, v1alpha1.EvacuationName(maint, "modes-store")); !apierrors.IsNotFound(err) {
		t.Errorf("an Evacuation was created for a Maintenance drain of a Decommission-only provider (%v)", err)
	}
	if _, ok := appPod(t, e, maint, "modestore-m"); ok {
		t.Errorf("the pod was not evicted from %s", maint)
	}

	nd = e.waitDrain(t, decom, "Drained (Decommission)", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	ev, err := getEvacuation(t, e, v1alpha1.EvacuationName(decom, "modes-store"))
	if err != nil || ev.Spec.Mode != v1alpha1.ModeDecommission || ev.Status.Phase != v1alpha1.EvacuationCompleted || len(nd.Status.Hooks) != 1 {
		t.Errorf("Decommission drain: Evacuation %+v / %+v (%v); hooks %+v", ev.Spec, ev.Status, err, nd.Status.Hooks)
	}
	if store.wasAsked(maint) || !store.wasAsked(decom) {
		t.Errorf("provider asked about %v; want only %s", store.asked, decom)
	}
	cancelDrain(t, e, maint, 20*time.Second)
	cancelDrain(t, e, decom, 20*time.Second)
}

// TestEvacuationNeverTakenUp: a registered provider that never answers
// (nothing runs for it) holds its pod; once its timeout passed the drain
// says it has not taken up the request, without waiting for the resync.
// Cancelling the drain deletes the untouched Evacuation at once (nobody
// would answer a Cancel) and gives the node back; the pod never left.
func TestEvacuationNeverTakenUp(t *testing.T) {
	e, ns, nodes := evacScene(t, "evghost", 1, map[string]int{"ghoststore": 0})
	target := nodes[0]
	const timeout = 2 * time.Second
	create(t, e, provider("ghost-store", v1alpha1.StageBeforeEviction, timeout, "ghoststore"))
	pod, ok := appPod(t, e, target, "ghoststore")
	if !ok {
		t.Fatal("no ghoststore pod on the node")
	}
	evName := v1alpha1.EvacuationName(target, "ghost-store")
	holds := func(detail string) func(*v1alpha1.NodeDrain) bool {
		return func(nd *v1alpha1.NodeDrain) bool {
			return slices.ContainsFunc(nd.Status.Blockers, func(b v1alpha1.Blocker) bool {
				return b.Reason == v1alpha1.BlockerEvacuation && b.Pod == ns+"/"+pod.Name && strings.Contains(b.Detail, detail)
			})
		}
	}

	requestAll(t, e, []string{target})
	e.waitDrain(t, target, "waiting for the provider", 20*time.Second, holds("waiting for provider ghost-store to take up the request"))
	ev, err := getEvacuation(t, e, evName)
	if err != nil {
		t.Fatal(err)
	}
	// The message turns when the timeout has passed: vacate requeues for
	// that moment rather than waiting for its 30s resync.
	left := time.Until(ev.CreationTimestamp.Add(timeout))
	nd := e.waitDrain(t, target, "saying the provider has not taken up the request", left+4*time.Second,
		holds("provider ghost-store has not taken up the request for"))
	t.Logf("not taken up: %s", testenv.DescribeDrain(nd))
	if !holds("(timeout 2s): is it running?")(nd) {
		t.Errorf("the blocker does not name the timeout: %s", testenv.DescribeDrain(nd))
	}

	t.Log("cancel: the untouched Evacuation is deleted at once and the node given back")
	took := cancelDrain(t, e, target, 5*time.Second)
	t.Logf("cancelled and released in %s", took.Round(time.Millisecond))
	if _, err := getEvacuation(t, e, evName); !apierrors.IsNotFound(err) {
		t.Errorf("Evacuation %s still there after the undo (%v)", evName, err)
	}
	if n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), target, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s not given back after the undo (%v)", target, err)
	}
	if p, ok := appPod(t, e, target, "ghoststore"); !ok || p.UID != pod.UID || p.DeletionTimestamp != nil {
		t.Errorf("the protected pod %s was evicted although its evacuation was never taken up", pod.Name)
	}
}

// The tests below reproduce bugs found in review; each failed before its fix.

// TestEvacuationWithUnrelatedProvider: a provider with no pods on the node
// (sorted first) must not stop the others from being asked: the protected
// pod stays until its own provider's evacuation is Completed.
func TestEvacuationWithUnrelatedProvider(t *testing.T) {
	e, ns, nodes := evacScene(t, "evunrel", 1, map[string]int{"unrelstore": 0})
	target := nodes[0]
	create(t, e, provider("aaa-elsewhere", v1alpha1.StageBeforeEviction, 5*time.Second, "not-on-this-node"))
	create(t, e, provider("bbb-store", v1alpha1.StageBeforeEviction, 5*time.Second, "unrelstore"))
	store := &slowStore{}
	runProvider(t, e.c, "bbb-store", store)
	check := guardProtected(t, e, ns, "unrelstore", target, "bbb-store")

	requestAll(t, e, []string{target})
	evName := v1alpha1.EvacuationName(target, "bbb-store")
	e.waitDrain(t, target, "holding the pod for bbb-store", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return slices.ContainsFunc(nd.Status.Blockers, func(b v1alpha1.Blocker) bool {
			return b.Reason == v1alpha1.BlockerEvacuation && b.Holder == "Evacuation "+evName
		}) && len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Name == evName
	})
	if _, err := getEvacuation(t, e, v1alpha1.EvacuationName(target, "aaa-elsewhere")); !apierrors.IsNotFound(err) {
		t.Errorf("an Evacuation was created for a provider with nothing on the node (%v)", err)
	}
	store.release.Store(true)
	e.waitDrain(t, target, "Drained", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	check()
	cancelDrain(t, e, target, 20*time.Second)
}

// TestEvacuationPhaseEvictingOnceCompleted: once the evacuation is
// Completed, a pod that a PDB still holds is reported as Evicting, not
// Evacuating.
func TestEvacuationPhaseEvictingOnceCompleted(t *testing.T) {
	e, ns, nodes := evacScene(t, "evphase", 1, map[string]int{"phasestore": 0})
	target := nodes[0]
	ctx := testenv.Context(t)
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "phasestore", "phasestore", "", "0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, e.c.Client, ns, "phasestore", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	create(t, e, provider("phase-store", v1alpha1.StageBeforeEviction, 5*time.Second, "phasestore"))
	store := &slowStore{}
	runProvider(t, e.c, "phase-store", store)
	requestAll(t, e, []string{target})
	e.waitDrain(t, target, "Evacuating", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseEvacuating })
	store.release.Store(true)
	e.waitDrain(t, target, "Evicting, the PDB holding the evacuated pod", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseEvicting && meta.IsStatusConditionTrue(nd.Status.Conditions, v1alpha1.ConditionEvacuated) &&
			len(nd.Status.Blockers) == 1 && nd.Status.Blockers[0].Reason == v1alpha1.BlockerPDB
	})
	if err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "phasestore", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, target, "Drained", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	cancelDrain(t, e, target, 20*time.Second)
}

// TestEvacuationForceDeleteSparesProtected: onTimeout ForceDelete deletes
// the pods left after the drain timeout, but never one whose evacuation is
// not Completed (safety invariant 3), and the drain is not Drained.
func TestEvacuationForceDeleteSparesProtected(t *testing.T) {
	e, _, nodes := evacScene(t, "evforce", 1, map[string]int{"forcestore": 0, "forceweb": 0})
	target := nodes[0]
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "evforce"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "evforce"}},
		Timeouts:     v1alpha1.Timeouts{Drain: &metav1.Duration{Duration: 2 * time.Second}, OnTimeout: "ForceDelete"},
	}})
	create(t, e, provider("force-store", v1alpha1.StageBeforeEviction, 30*time.Second, "forcestore")) // nothing runs for it
	pod, ok := appPod(t, e, target, "forcestore")
	if !ok {
		t.Fatal("no forcestore pod on the node")
	}
	requestAll(t, e, []string{target})
	e.waitDrain(t, target, "timed out", 20*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionBlocked)
		return c != nil && c.Reason == v1alpha1.ReasonDrainTimeout
	})
	time.Sleep(2 * time.Second)
	if p, ok := appPod(t, e, target, "forcestore"); !ok || p.UID != pod.UID || p.DeletionTimestamp != nil {
		t.Errorf("pod %s was force-deleted although its evacuation was never Completed", pod.Name)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(context.Background(), types.NamespacedName{Name: target}, nd); err != nil || nd.Status.Phase == v1alpha1.PhaseDrained {
		t.Errorf("drain Drained with an evacuation not Completed (%v): %s", err, testenv.DescribeDrain(nd))
	}
	cancelDrain(t, e, target, 20*time.Second)
}
