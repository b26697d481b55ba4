package nodedrain_test

import (
	"context"
	"fmt"
	"net/http"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// keptPods watches pods from now until check is called and fails the test if
// any of them starts terminating or is deleted at any moment in between (not
// only at the end), or is not there, the same pod, when check runs.
func keptPods(t *testing.T, e *env, ns string, pods ...corev1.Pod) (check func()) {
	t.Helper()
	watched := map[types.UID]string{}
	for _, p := range pods {
		watched[p.UID] = p.Name
	}
	list, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var violations []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("watching pods: %v", err))
					mu.Unlock()
				}
				return
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				name, kept := watched[p.UID]
				if kept && (ev.Type == watch.Deleted || p.DeletionTimestamp != nil) {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("pod %s/%s was deleted (watch event %s)", ns, name, ev.Type))
					mu.Unlock()
				}
			}
		}
	}()
	return func() {
		t.Helper()
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			t.Error(v)
		}
		for uid, name := range watched {
			p, err := e.c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil || p.UID != uid || p.DeletionTimestamp != nil {
				t.Errorf("pod %s/%s is not on its node as it was (%v)", ns, name, err)
			}
		}
	}
}

// waitEvent waits for an Event of the NodeDrain with the reason whose
// message holds every one of parts, and returns that message.
func waitEvent(t *testing.T, e *env, drainName, reason string, parts ...string) string {
	t.Helper()
	var seen []string
	var found string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=NodeDrain,involvedObject.name=" + drainName})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range list.Items {
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && containsAll(ev.Message, parts...) {
				found = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event of NodeDrain %s saying %q; events: %q", reason, drainName, parts, seen)
	}
	return found
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// pinned runs a single-replica Deployment per app on the node it names (its
// replacement cannot land elsewhere) and returns each app's pod.
func pinned(t *testing.T, e *env, ns string, apps map[string]string, annotations map[string]string) map[string]corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	out := map[string]corev1.Pod{}
	for app, node := range apps {
		d := devcluster.Deployment(ns, app, 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
		d.Spec.Template.Annotations = annotations
		if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: app}), 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		out[app] = ready[0]
	}
	return out
}

// barePod creates a pod with no controller on node, with the annotations.
func barePod(t *testing.T, e *env, ns, name, node string, annotations map[string]string) corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	p := devcluster.BarePod(ns, name, node)
	p.Annotations = annotations
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ready[0]
}

// podGone waits until the pod with this UID is no longer on the API server.
func podGone(t *testing.T, e *env, pod corev1.Pod, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID), nil
	})
	if err != nil {
		t.Errorf("pod %s/%s %s: it is still there", pod.Namespace, pod.Name, what)
	}
}

// conditionsSay fails the test unless the drain's Blocked and Drained
// conditions both have the reason and messages that hold every one of parts.
func conditionsSay(t *testing.T, nd *v1alpha1.NodeDrain, reason string, parts ...string) {
	t.Helper()
	for _, typ := range []string{v1alpha1.ConditionBlocked, v1alpha1.ConditionDrained} {
		c := meta.FindStatusCondition(nd.Status.Conditions, typ)
		if c == nil || c.Reason != reason || !containsAll(c.Message, parts...) {
			t.Errorf("%s condition %+v: want reason %s and a message with %q", typ, c, reason, parts)
		}
	}
}

// TestForceDeleteEndsWithProtectedPodSpared: under onTimeout ForceDelete,
// once timeouts.drain passes, the drain deletes the pods it may (an
// unmanaged bare pod) and never the ones it must not: a pod held by an
// evacuation that never completes (its provider does not run) and a pod
// annotated wait-completed, watched from before the drain to its end. The
// drain still ends: Failed, its Blocked and Drained conditions naming both
// spared pods and why. A node with nothing to spare ends Drained.
func TestForceDeleteEndsWithProtectedPodSpared(t *testing.T) {
	e, ns, nodes := evacScene(t, "fdspare", 2, map[string]int{"sparestore": 0})
	spared, clean := nodes[0], nodes[1]
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fdspare"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "fdspare"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(2))},
		Timeouts:     v1alpha1.Timeouts{Drain: &metav1.Duration{Duration: 3 * time.Second}, OnTimeout: "ForceDelete"},
	}})
	create(t, e, provider("spare-store", v1alpha1.StageBeforeEviction, time.Minute, "sparestore")) // nothing runs for it
	store, ok := appPod(t, e, spared, "sparestore")
	if !ok {
		t.Fatal("no sparestore pod on the node")
	}
	waiter := barePod(t, e, ns, "waiter", spared, map[string]string{"vacate.dev/drain": "wait-completed"})
	bare := barePod(t, e, ns, "bare", spared, nil)
	lonely := barePod(t, e, ns, "lonely", clean, nil)
	check := keptPods(t, e, ns, store, waiter)
	evName := v1alpha1.EvacuationName(spared, "spare-store")

	requestAll(t, e, nodes)
	t.Log("past timeouts.drain the bare pods are deleted; the drain with pods it must spare ends Failed naming them")
	nd := e.waitDrain(t, spared, "Failed", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseFailed })
	t.Logf("final status: %s", testenv.DescribeDrain(nd))
	conditionsSay(t, nd, v1alpha1.ReasonDrainTimeout, "will not delete",
		ns+"/"+store.Name+" (held by Evacuation "+evName+")",
		ns+"/waiter (annotated vacate.dev/drain: wait-completed)")
	podGone(t, e, bare, "should have been deleted after the timeout (onTimeout ForceDelete)")
	waitEvent(t, e, spared, v1alpha1.EventForceDeleted, ns+"/bare")
	waitEvent(t, e, spared, "Failed", ns+"/"+store.Name, ns+"/waiter")

	t.Log("the node with nothing to spare ends Drained")
	nd = e.waitDrain(t, clean, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	t.Logf("final status: %s", testenv.DescribeDrain(nd))
	podGone(t, e, lonely, "should have been deleted after the timeout (onTimeout ForceDelete)")

	cancelDrain(t, e, spared, 30*time.Second)
	cancelDrain(t, e, clean, 30*time.Second)
	check()
}

// stuckCancelStore completes every evacuation at once but never finishes a
// cancel: its Cancel reports work left forever.
type stuckCancelStore struct {
	cancels atomic.Int64
}

func (s *stuckCancelStore) Evacuate(context.Context, string, v1alpha1.DrainMode) (evacuation.Progress, error) {
	return evacuation.Progress{Done: true, Message: "every replica has a copy elsewhere"}, nil
}

func (s *stuckCancelStore) Cancel(_ context.Context, node string) (evacuation.Progress, error) {
	s.cancels.Add(1)
	return evacuation.Progress{Remaining: 3, Message: "removing the extra replicas made for " + node}, nil
}

// refusingCancel is a hook app that never acknowledges a cancel: every
// DELETE is answered 503.
type refusingCancel struct {
	*hookApp
	deletes atomic.Int64
}

func (a *refusingCancel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		a.deletes.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("still forwarding; try later"))
		return
	}
	a.hookApp.ServeHTTP(w, r)
}

// nodeGivenBack fails the test unless the node is schedulable again and
// carries no cordon record of vacate's.
func nodeGivenBack(t *testing.T, e *env, name string) {
	t.Helper()
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[v1alpha1.AnnotationCordonedBy] != "" {
		t.Errorf("node %s not given back: unschedulable=%t annotations=%v", name, n.Spec.Unschedulable, n.Annotations)
	}
}

// providerDeleted deletes the EvacuationProvider and waits until it is gone
// (no finalizer of vacate's holds it).
func providerDeleted(t *testing.T, e *env, name string) {
	t.Helper()
	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.cl.Delete(context.Background(), p); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: name}, p)), nil
	})
	if err != nil {
		t.Errorf("EvacuationProvider %s still there after its deletion: finalizers %v", name, p.Finalizers)
	}
}

// TestCancelBoundedWhenProviderNeverConfirms: timeouts.cancel bounds an
// undo. A provider that finished its evacuation is asked to cancel when the
// drain is cancelled, and never confirms; an HTTP hook answers every DELETE
// with 503. In both cases, once the bound passes, the node is uncordoned and
// the NodeDrain released, with a Warning CancelTimeout naming who did not
// confirm.
func TestCancelBoundedWhenProviderNeverConfirms(t *testing.T) {
	e := startEnv(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "cxbound", Count: 2, Labels: map[string]string{"pool": "cxbound"}})
	ns := testenv.Namespace(t, e.c)
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cxbound"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cxbound"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(2))},
		Timeouts:     v1alpha1.Timeouts{Cancel: &metav1.Duration{Duration: 3 * time.Second}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}})

	t.Run("Provider", func(t *testing.T) {
		target := nodes[0]
		pinned(t, e, ns, map[string]string{"cxstore": target}, nil)
		create(t, e, provider("cx-store", v1alpha1.StageBeforeEviction, 30*time.Second, "cxstore"))
		store := &stuckCancelStore{}
		runProvider(t, e.c, "cx-store", store)
		evName := v1alpha1.EvacuationName(target, "cx-store")

		requestAll(t, e, []string{target})
		e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
		t.Log("cancel: the provider is asked to undo and never confirms; the undo ends at timeouts.cancel")
		took := cancelDrain(t, e, target, time.Minute)
		t.Logf("released %s after the cancel", took.Round(time.Millisecond))
		if store.cancels.Load() == 0 {
			t.Error("the provider was never asked to cancel")
		}
		nodeGivenBack(t, e, target)
		if _, err := getEvacuation(t, e, evName); !apierrors.IsNotFound(err) {
			t.Errorf("Evacuation %s still there after the undo (%v)", evName, err)
		}
		msg := waitEvent(t, e, target, v1alpha1.EventCancelTimeout, "EvacuationProvider cx-store", evName, "timeouts.cancel")
		t.Logf("event: %s", msg)
		t.Log("nothing of the undone drain holds the provider: it can be deleted")
		providerDeleted(t, e, "cx-store")
	})

	t.Run("HTTPHook", func(t *testing.T) {
		target := nodes[1]
		const port = 18090
		pod := pinned(t, e, ns, map[string]string{"cxbroker": target},
			map[string]string{hook.AnnotationPort: fmt.Sprint(port)})["cxbroker"]
		app := &refusingCancel{hookApp: &hookApp{answer: answer(200, `{"state":"InProgress","message":"forwarding stored messages","remaining":40}`)}}
		serveHook(t, &pod, port, app)
		check := keptPods(t, e, ns, pod)

		requestAll(t, e, []string{target})
		e.waitDrain(t, target, "held by the hook in progress", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
			return len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationInProgress)
		})
		t.Log("cancel: the hook refuses every DELETE; the undo ends at timeouts.cancel")
		took := cancelDrain(t, e, target, time.Minute)
		t.Logf("released %s after the cancel", took.Round(time.Millisecond))
		if app.deletes.Load() == 0 {
			t.Error("the hook got no DELETE")
		}
		nodeGivenBack(t, e, target)
		msg := waitEvent(t, e, target, v1alpha1.EventCancelTimeout, "pod/"+ns+"/"+pod.Name, "did not acknowledge", "timeouts.cancel")
		t.Logf("event: %s", msg)
		check()
	})
}

// TestEvacuationTimeout: timeouts.evacuation bounds an evacuation that goes
// on and never completes: an Evacuation whose provider works on, or an HTTP
// hook that keeps answering InProgress. Under onTimeout Fail the drain is
// Failed with reason EvacuationTimedOut and every pod stays; under
// ForceDelete the pods nothing protects (a bare pod, a pod behind a PDB that
// allows nothing) are deleted and the protected one is not: the drain is
// Failed naming it. Either way status.hooks says TimedOut, and the
// protected pod is watched throughout.
func TestEvacuationTimeout(t *testing.T) {
	e := startEnv(t)
	for _, tc := range []struct {
		name, onTimeout string
		hook            bool // protected by its own HTTP hook, not by a provider
	}{
		{"Fail", "Fail", false},
		{"ForceDelete", "ForceDelete", false},
		{"HTTPHookFail", "Fail", true},
		{"HTTPHookForceDelete", "ForceDelete", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evacuationTimeoutCase(t, e, "evto-"+strings.ToLower(tc.name), tc.onTimeout, tc.hook)
		})
	}
}

// evacuationTimeoutCase runs one case of TestEvacuationTimeout on a node of
// its own named after prefix.
func evacuationTimeoutCase(t *testing.T, e *env, prefix, onTimeout string, viaHook bool) {
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix, Count: 1, Labels: map[string]string{"pool": prefix}})
	target := nodes[0]
	ns := testenv.Namespace(t, e.c)
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": prefix}},
		Timeouts:     v1alpha1.Timeouts{Evacuation: &metav1.Duration{Duration: 3 * time.Second}, OnTimeout: onTimeout},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: viaHook},
	}})
	storeApp, webApp := prefix+"-store", prefix+"-web"
	const port = 18091
	var storeAnnotations map[string]string
	if viaHook {
		storeAnnotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
	}
	store := pinned(t, e, ns, map[string]string{storeApp: target}, storeAnnotations)[storeApp]
	web := pinned(t, e, ns, map[string]string{webApp: target}, nil)[webApp]
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, webApp, webApp, "", "0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, e.c.Client, ns, webApp, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	bare := barePod(t, e, ns, prefix+"-bare", target, nil)
	// evName is the evacuation's name in status.hooks; holder, how the
	// drain names what holds the pod.
	evName, holder := v1alpha1.EvacuationName(target, storeApp), ""
	if viaHook {
		evName, holder = "pod/"+ns+"/"+store.Name, "HTTP hook of pod "+ns+"/"+store.Name
		serveHook(t, &store, port, &hookApp{answer: answer(200, `{"state":"InProgress","message":"forwarding stored messages","remaining":40}`)})
	} else {
		holder = "Evacuation " + evName
		create(t, e, provider(storeApp, v1alpha1.StageBeforeEviction, 30*time.Second, storeApp))
		runProvider(t, e.c, storeApp, &slowStore{}) // works on, never completes
	}
	check := keptPods(t, e, ns, store)

	requestAll(t, e, []string{target})
	nd := e.waitDrain(t, target, "Failed", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseFailed })
	t.Logf("final status: %s", testenv.DescribeDrain(nd))
	conditionsSay(t, nd, v1alpha1.ReasonEvacuationTimedOut, evName+" not Completed within 3s")
	if len(nd.Status.Hooks) != 1 || nd.Status.Hooks[0].Name != evName || nd.Status.Hooks[0].Phase != v1alpha1.PhaseTimedOut {
		t.Errorf("status.hooks %+v: want %s %s", nd.Status.Hooks, evName, v1alpha1.PhaseTimedOut)
	}
	if !viaHook {
		if ev, err := getEvacuation(t, e, evName); err != nil || ev.Status.Phase != v1alpha1.EvacuationInProgress {
			t.Errorf("Evacuation %s: phase %q (%v), want it still InProgress", evName, ev.Status.Phase, err)
		}
	}
	switch onTimeout {
	case "Fail":
		if left := podsOn(t, e, ns, target); len(left) != 3 {
			t.Errorf("pods on the node %v: want all three kept in place (onTimeout Fail)", names(left))
		}
	case "ForceDelete":
		conditionsSay(t, nd, v1alpha1.ReasonEvacuationTimedOut, "will not delete "+ns+"/"+store.Name+" (held by "+holder+")")
		podGone(t, e, bare, "should have been deleted after the timeout (onTimeout ForceDelete)")
		podGone(t, e, web, "should have been deleted after the timeout (onTimeout ForceDelete)")
	}
	cancelDrain(t, e, target, 30*time.Second)
	check()
}
