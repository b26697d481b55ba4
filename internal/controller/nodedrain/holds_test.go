package nodedrain_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// providerFinalizer is the design's fixed name of the finalizer that holds
// a deleted EvacuationProvider while an unfinished Evacuation names it.
const providerFinalizer = "vacate.dev/evacuations"

// staysUntil fails the test if a pod of app on node starts terminating
// before mayLeave reports true: it watches the pods throughout. check ends
// the watch and reports; it also fails when no pod was seen leaving at all
// (when leaveExpected), so the guard cannot pass by watching nothing.
func staysUntil(t *testing.T, e *env, ns, app, node string, mayLeave func() bool) (check func(leaveExpected bool)) {
	t.Helper()
	return watchLeaving(t, e, ns, app, node, func(p *corev1.Pod) string {
		if mayLeave() {
			return ""
		}
		return fmt.Sprintf("pod %s left %s while it was still protected", p.Name, node)
	})
}

// watchLeaving watches the pods of app on node and asks violation about
// each one seen leaving (terminating or deleted); check ends the watch and
// fails the test with every violation, and, when leaveExpected, if no pod
// was seen leaving at all.
func watchLeaving(t *testing.T, e *env, ns, app, node string, violation func(*corev1.Pod) string) (check func(leaveExpected bool)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: devcluster.AppLabel + "=" + app})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var violations []string
	left := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName != node || (p.DeletionTimestamp == nil && ev.Type != "DELETED") {
				continue
			}
			v := violation(p)
			mu.Lock()
			left++
			if v != "" {
				violations = append(violations, v)
			}
			mu.Unlock()
		}
	}()
	return func(leaveExpected bool) {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			t.Error(v)
		}
		if leaveExpected && left == 0 {
			t.Errorf("no %s pod was seen leaving %s: the guard proved nothing", app, node)
		}
	}
}

// heldBy waits until the drain holds a pod of app for the Evacuation, with a
// detail containing detail.
func heldBy(t *testing.T, e *env, node, ns, app, evName, detail string) *v1alpha1.NodeDrain {
	t.Helper()
	return e.waitDrain(t, node, "holding "+app+" for "+evName+" ("+detail+")", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Reason == v1alpha1.BlockerEvacuation && strings.HasPrefix(b.Pod, ns+"/"+app+"-") &&
				b.Holder == "Evacuation "+evName && strings.Contains(b.Detail, detail) {
				return true
			}
		}
		return false
	})
}

func updateProvider(t *testing.T, e *env, name string, change func(*v1alpha1.EvacuationProvider)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &v1alpha1.EvacuationProvider{}
		if err := e.cl.Get(context.Background(), types.NamespacedName{Name: name}, p); err != nil {
			return err
		}
		change(p)
		return e.cl.Update(context.Background(), p)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHoldSurvivesProviderDeletion: the provider's object is deleted while
// its evacuation is InProgress (an uninstall, a chart reinstall). The pod it
// protects stays; the object stays too (finalizer) and the drain says the
// provider was deleted while evacuating; the provider's process finishes the
// job, then the pod goes and the provider object is released.
func TestHoldSurvivesProviderDeletion(t *testing.T) {
	e, ns, nodes := evacScene(t, "hdel", 1, map[string]int{"delstore": 0})
	target := nodes[0]
	create(t, e, provider("del-store", v1alpha1.StageBeforeEviction, 5*time.Second, "delstore"))
	store := &slowStore{}
	runProvider(t, e.c, "del-store", store)
	check := staysUntil(t, e, ns, "delstore", target, store.release.Load)
	evName := v1alpha1.EvacuationName(target, "del-store")

	requestAll(t, e, []string{target})
	heldBy(t, e, target, ns, "delstore", evName, "InProgress")
	t.Log("deleting the EvacuationProvider mid-evacuation")
	if err := e.cl.Delete(testenv.Context(t), &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "del-store"}}); err != nil {
		t.Fatal(err)
	}
	nd := heldBy(t, e, target, ns, "delstore", evName, "provider del-store deleted while evacuating 1 pod(s) on node "+target)
	t.Logf("while the provider is being deleted: %s", testenv.DescribeDrain(nd))
	p := &v1alpha1.EvacuationProvider{}
	if err := e.cl.Get(testenv.Context(t), types.NamespacedName{Name: "del-store"}, p); err != nil {
		t.Fatalf("the provider object went away while its evacuation was unfinished: %v", err)
	}
	if !controllerutil.ContainsFinalizer(p, providerFinalizer) || p.DeletionTimestamp.IsZero() {
		t.Errorf("provider: finalizers %v, deleting %v; want %s held while deleting", p.Finalizers, !p.DeletionTimestamp.IsZero(), providerFinalizer)
	}

	t.Log("the provider's process finishes: the pod goes, the drain ends, the provider object is released")
	store.release.Store(true)
	e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	check(true)
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: "del-store"}, &v1alpha1.EvacuationProvider{})), nil
	})
	if err != nil {
		t.Error("the deleted provider was not released once its evacuation Completed")
	}
	cancelDrain(t, e, target, 30*time.Second)
}

// TestHoldSurvivesProviderEditsAndRelabel: while the evacuation is
// InProgress the provider's podSelector is narrowed to nothing, its stage
// switched to AfterEviction, and the pod relabelled out of the selector:
// none of it releases the pod, which leaves only once the evacuation the
// drain asked for is Completed.
func TestHoldSurvivesProviderEditsAndRelabel(t *testing.T) {
	e, ns, nodes := evacScene(t, "hedit", 1, map[string]int{"editstore": 0})
	target := nodes[0]
	ctx := testenv.Context(t)
	p := provider("edit-store", v1alpha1.StageBeforeEviction, 5*time.Second)
	p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}
	create(t, e, p)
	pod, ok := appPod(t, e, target, "editstore")
	if !ok {
		t.Fatal("no editstore pod on the node")
	}
	label := func(v string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"tier":%s}}}`, v)
		if _, err := e.c.Client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(`"data"`)
	store := &slowStore{}
	runProvider(t, e.c, "edit-store", store)
	check := staysUntil(t, e, ns, "editstore", target, store.release.Load)
	evName := v1alpha1.EvacuationName(target, "edit-store")

	requestAll(t, e, []string{target})
	heldBy(t, e, target, ns, "editstore", evName, "InProgress")
	ev, err := getEvacuation(t, e, evName)
	if err != nil || len(ev.Spec.ProtectedPods) != 1 || ev.Spec.ProtectedPods[0].UID != string(pod.UID) {
		t.Fatalf("Evacuation's protectedPods = %+v (%v), want the pod %s/%s", ev.Spec.ProtectedPods, err, pod.Name, pod.UID)
	}
	t.Log("narrowing the provider's podSelector to nothing")
	updateProvider(t, e, "edit-store", func(p *v1alpha1.EvacuationProvider) {
		p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"tier": "nothing"}}
	})
	time.Sleep(2 * time.Second) // passes follow the provider's update; the guard watches throughout
	heldBy(t, e, target, ns, "editstore", evName, "InProgress")
	t.Log("switching its stage to AfterEviction")
	updateProvider(t, e, "edit-store", func(p *v1alpha1.EvacuationProvider) { p.Spec.Stage = v1alpha1.StageAfterEviction })
	time.Sleep(2 * time.Second)
	heldBy(t, e, target, ns, "editstore", evName, "InProgress")
	t.Log("relabelling the pod out of any selector")
	label(`null`)
	time.Sleep(2 * time.Second)
	heldBy(t, e, target, ns, "editstore", evName, "InProgress")

	t.Log("the evacuation completes: now the pod goes")
	store.release.Store(true)
	e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	check(true)
	cancelDrain(t, e, target, 30*time.Second)
}

// TestPodQueuedBeforeProviderRegistered: pods queued for eviction (a PDB
// refuses them, so they wait in the queue's backoff) become protected when a
// provider registers mid-drain. When the PDB then allows, they are not
// evicted until the new provider's evacuation is Completed: every eviction
// is checked against the holds right before it is made.
func TestPodQueuedBeforeProviderRegistered(t *testing.T) {
	e, ns, nodes := evacScene(t, "hlate", 1, map[string]int{})
	target := nodes[0]
	ctx := testenv.Context(t)
	apiBehindPDB(t, e, ns, map[string]string{devcluster.HostnameLabel: target}, 2, "0")
	requestAll(t, e, []string{target})
	e.waitDrain(t, target, "refused by the PDB", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Blocked == 2 && nd.Status.Blockers[0].Reason == v1alpha1.BlockerPDB
	})
	time.Sleep(3 * time.Second) // a few refusals: the queue's backoff grows

	t.Log("registering a provider for the api pods mid-drain")
	create(t, e, provider("late-store", v1alpha1.StageBeforeEviction, 5*time.Second, "api"))
	store := &slowStore{}
	runProvider(t, e.c, "late-store", store)
	check := staysUntil(t, e, ns, "api", target, store.release.Load)
	heldBy(t, e, target, ns, "api", v1alpha1.EvacuationName(target, "late-store"), "InProgress")
	t.Log("the PDB now allows every disruption; the pods must still wait for the evacuation")
	if err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // past the queue's backoff of the refused pods
	store.release.Store(true)
	e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	check(true)
	cancelDrain(t, e, target, 30*time.Second)
}

// countingStore completes at once and counts the cancels it is asked for.
type countingStore struct {
	asked, cancels atomic.Int64
}

func (s *countingStore) Evacuate(context.Context, string, v1alpha1.DrainMode) (evacuation.Progress, error) {
	s.asked.Add(1)
	return evacuation.Progress{Done: true, Message: "moved"}, nil
}

func (s *countingStore) Cancel(context.Context, string) (evacuation.Progress, error) {
	s.cancels.Add(1)
	return evacuation.Progress{Done: true, Message: "moved back"}, nil
}

// TestDecommissionAsksEveryProviderAndKeepsItsWork: a Decommission drain
// asks every provider that takes part, including one none of whose pods are
// on the node (a storage agent elsewhere, data whose consumers run on other
// nodes); a Maintenance drain does not. Cancelling the Decommission drain
// after its evacuations Completed does not ask the providers to cancel: the
// moved data stays moved. A Maintenance drain's cancel does.
func TestDecommissionAsksEveryProviderAndKeepsItsWork(t *testing.T) {
	e, _, nodes := evacScene(t, "hdecom", 2, map[string]int{"decomstore": 0, "maintstore": 1})
	decom, maint := nodes[0], nodes[1]
	ctx := testenv.Context(t)
	create(t, e, provider("pods-store", v1alpha1.StageBeforeEviction, 5*time.Second, "decomstore", "maintstore"))
	create(t, e, provider("elsewhere-store", v1alpha1.StageBeforeEviction, 5*time.Second, "nothing-here"))
	pods, elsewhere := &countingStore{}, &countingStore{}
	runProvider(t, e.c, "pods-store", pods)
	runProvider(t, e.c, "elsewhere-store", elsewhere)

	if err := requests.Apply(ctx, e.cl, decom, v1alpha1.Requester{Name: "cli:test", Reason: "retire"}, v1alpha1.ModeDecommission, ""); err != nil {
		t.Fatal(err)
	}
	requestAll(t, e, []string{maint})
	nd := e.waitDrain(t, decom, "Drained (Decommission)", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if len(nd.Status.Hooks) != 2 {
		t.Errorf("Decommission drain: hooks %+v, want both providers' evacuations", nd.Status.Hooks)
	}
	if ev, err := getEvacuation(t, e, v1alpha1.EvacuationName(decom, "elsewhere-store")); err != nil || ev.Status.Phase != v1alpha1.EvacuationCompleted {
		t.Errorf("the provider with no pod on the node was not asked in Decommission (%v)", err)
	}
	e.waitDrain(t, maint, "Drained (Maintenance)", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	if _, err := getEvacuation(t, e, v1alpha1.EvacuationName(maint, "elsewhere-store")); !apierrors.IsNotFound(err) {
		t.Errorf("a Maintenance drain asked a provider that protects nothing on the node (%v)", err)
	}

	t.Log("cancelling the Decommission drain: no provider is asked to cancel")
	cancelDrain(t, e, decom, 30*time.Second)
	if n := pods.cancels.Load() + elsewhere.cancels.Load(); n != 0 {
		t.Errorf("providers were asked to cancel %d time(s) after a completed Decommission", n)
	}
	if _, err := getEvacuation(t, e, v1alpha1.EvacuationName(decom, "pods-store")); !apierrors.IsNotFound(err) {
		t.Errorf("the Decommission drain's Evacuation is still there after the undo (%v)", err)
	}
	t.Log("cancelling the Maintenance drain: its provider undoes")
	cancelDrain(t, e, maint, 30*time.Second)
	if pods.cancels.Load() == 0 {
		t.Error("the Maintenance drain's provider was never asked to cancel")
	}
}

// TestCancelOfDeletedNodeKeepsWork: the node of a Maintenance drain is
// deleted while its provider evacuates; cancelling the drain then does not
// ask the provider to undo (the node is gone; what moved stays moved).
func TestCancelOfDeletedNodeKeepsWork(t *testing.T) {
	e, _, nodes := evacScene(t, "hgone", 1, map[string]int{"gonestore": 0})
	target := nodes[0]
	create(t, e, provider("gone-store", v1alpha1.StageBeforeEviction, 5*time.Second, "gonestore"))
	store := &slowStore{}
	counter := &cancelCounter{slowStore: store}
	runProvider(t, e.c, "gone-store", counter)
	requestAll(t, e, []string{target})
	e.waitDrain(t, target, "evacuating", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseEvacuating })
	t.Log("deleting the node (no vacate finalizer under this policy), then cancelling the drain")
	if err := e.c.Client.CoreV1().Nodes().Delete(testenv.Context(t), target, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal("the node was not deleted")
	}
	cancelDrain(t, e, target, 30*time.Second)
	if n := counter.cancels.Load(); n != 0 {
		t.Errorf("the provider was asked to cancel %d time(s) for a node that is gone", n)
	}
}

// cancelCounter is a slowStore that counts cancels.
type cancelCounter struct {
	*slowStore
	cancels atomic.Int64
}

func (c *cancelCounter) Cancel(ctx context.Context, node string) (evacuation.Progress, error) {
	c.cancels.Add(1)
	return c.slowStore.Cancel(ctx, node)
}

// TestReplacedNodeStartsOver: a node is deleted and created again under the
// same name while its drain runs, after the provider completed the
// evacuation of the old node. The drain says so and treats the new node as
// new: it is asked again (a new Evacuation), and the pod that lands on the
// new node is not evicted before that new evacuation is Completed.
func TestReplacedNodeStartsOver(t *testing.T) {
	e, ns, nodes := evacScene(t, "hrepl", 1, map[string]int{"replstore": 0})
	target := nodes[0]
	ctx := testenv.Context(t)
	apiBehindPDB(t, e, ns, map[string]string{devcluster.HostnameLabel: target}, 1, "0") // keeps the drain running
	create(t, e, provider("repl-store", v1alpha1.StageBeforeEviction, 5*time.Second, "replstore"))
	store := &slowStore{}
	store.release.Store(true)
	runProvider(t, e.c, "repl-store", store)
	requestAll(t, e, []string{target})
	evName := v1alpha1.EvacuationName(target, "repl-store")
	e.waitDrain(t, target, "the store evacuated and evicted, api refused", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		_, there := appPod(t, e, target, "replstore")
		return !there && nd.Status.Blocked == 1
	})
	old, err := getEvacuation(t, e, evName)
	if err != nil || old.Status.Phase != v1alpha1.EvacuationCompleted {
		t.Fatalf("the old node's Evacuation is not Completed: %+v (%v)", old.Status, err)
	}
	oldNode, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Log("the provider slows down; the store is scaled to 0; the node is deleted and created again under the same name")
	store.release.Store(false)
	scale := []byte(`{"spec":{"replicas":0}}`)
	if _, err := e.c.Client.AppsV1().Deployments(ns).Patch(ctx, "replstore", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its replacement, Pending on the cordoned node, must be gone before
	// the node is: the node created again is schedulable until the drain
	// cordons it, and a replacement bound there and then deleted by the
	// scale-down would read as a protected pod leaving (CI saw it once).
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: devcluster.AppLabel + "=replstore"})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatal("the store's pods did not go after it was scaled to 0")
	}
	check := staysUntil(t, e, ns, "replstore", target, store.release.Load)
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: target, Labels: oldNode.Labels, Annotations: map[string]string{}}}
	for k, v := range oldNode.Annotations {
		if k != v1alpha1.AnnotationCordonedBy {
			fresh.Annotations[k] = v
		}
	}
	fresh.Spec.PodCIDR, fresh.Spec.PodCIDRs = oldNode.Spec.PodCIDR, oldNode.Spec.PodCIDRs
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.c.Client.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("could not create the node again")
	}
	if err := devcluster.WaitForNodesReady(ctx, e.c.Client, []string{target}, time.Minute); err != nil {
		t.Fatal(err)
	}
	newNode, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nd := e.waitDrain(t, target, "working on the new node", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.NodeUID == string(newNode.UID)
	})
	t.Logf("after the replacement: %s", testenv.DescribeDrain(nd))
	waitEvents(t, e, target, "NodeReplaced")

	t.Log("a store pod is bound to the new node (a ReplicaSet's pod with spec.nodeName, whatever the cordon)")
	newStorePod(t, e, ns, target)
	e.waitDrain(t, target, "holding the store's new pod", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Reason == v1alpha1.BlockerEvacuation && b.Pod == ns+"/replstore-new" {
				return true
			}
		}
		return false
	})
	ev, err := getEvacuation(t, e, evName)
	if err != nil || ev.UID == old.UID {
		t.Errorf("the new node's evacuation is the old node's Evacuation (uid %s, %v)", ev.UID, err)
	}
	time.Sleep(2 * time.Second)
	store.release.Store(true)
	e.waitDrain(t, target, "the new store pod evacuated and evicted", time.Minute, func(*v1alpha1.NodeDrain) bool {
		_, there := appPod(t, e, target, "replstore")
		return !there
	})
	check(true)
}

// newStorePod binds a pod of app replstore to node through spec.nodeName,
// then creates a ReplicaSet of one that adopts it (so the planner evicts it;
// a replacement, if any, is scheduled and stays Pending on the cordoned node).
func newStorePod(t *testing.T, e *env, ns, node string) {
	t.Helper()
	ctx := testenv.Context(t)
	sel := map[string]string{devcluster.AppLabel: "replstore", "gen": "new"}
	spec := corev1.PodSpec{
		NodeSelector: map[string]string{devcluster.HostnameLabel: node},
		Containers:   []corev1.Container{{Name: "store", Image: "vacate.dev/simulated:latest"}},
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "replstore-new", Labels: sel}, Spec: *spec.DeepCopy()}
	pod.Spec.NodeName, pod.Spec.NodeSelector = node, nil
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "replstore-new"}, Spec: appsv1.ReplicaSetSpec{
		Replicas: ptr.To[int32](1),
		Selector: &metav1.LabelSelector{MatchLabels: sel},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: spec},
	}}
	if _, err := e.c.Client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
