package coordinator_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/requests"
)

// drainWorld is a world whose node also runs plain pods (no responders),
// and a drain of it.
type drainWorld struct {
	*world
	cl    client.Client
	plain []corev1.Pod
}

// TestADrainAsksThroughEvictionRequests: a vacate drain of a node with pods
// that declare a responder (two, behind a PDB of maxUnavailable 1) and
// plain pods. A tenant took the names the drains give their requests first:
// the drain neither takes theirs for its own nor changes them. The plain
// pods are evicted as always, with no request; the responder pods are asked
// for with the drain's EvictionRequests, one at a time (the PDB's budget),
// and the drain's status, 'vacate status' and 'vacate explain' show the
// responder that has the turn and its message. 'vacate cancel' withdraws
// the request: the Eviction is cancelled and the pod stays. Asked again,
// the responder completes, the coordinator evicts the pod, and the other
// waits for the PDB, never asked while it allows no disruption; once the
// first pod's replacement runs on another node, the other is asked for
// too, and the node ends Drained.
func TestADrainAsksThroughEvictionRequests(t *testing.T) {
	w := newDrainWorld(t)
	squatted := w.squat()
	w.drain()
	asked := w.waitAsked(1)
	w.waitBlocker(asked, "responder "+backup+" has the turn")
	w.respond(asked, backup, func(s *lifecyclev1alpha1.ResponderStatus) {
		s.HeartbeatTime, s.Message = now(), ptr.To("moving 3 of 7 shards")
	})
	w.waitBlocker(asked, "moving 3 of 7 shards")
	for _, cmd := range [][]string{{"status", w.node, "-o", "wide"}, {"explain", w.node}} {
		out := w.vacate(cmd...)
		for _, want := range []string{asked.Name, backup, "moving 3 of 7 shards"} {
			if !strings.Contains(out, want) {
				t.Errorf("vacate %s does not say %q", cmd[0], want)
			}
		}
	}
	if n := len(w.drainRequests()); n != 1 {
		t.Errorf("%d pods asked for while the PDB allows one disruption, want 1", n)
	}

	// Cancelled: the request is withdrawn, the Eviction cancelled, the pod
	// stays. vacate cancel deletes the idle NodeDrain, and the garbage
	// collector the request and the Eviction with it, maybe before a poll
	// would see them: a watch sees every write.
	seen := w.watchWrites()
	w.vacate("cancel", w.node, "--requester", "cli:test")
	seen.waitFor(t, "the drain's request withdrawn and the Eviction cancelled", func(req *lifecyclev1alpha1.EvictionRequest, ev *lifecyclev1alpha1.Eviction) bool {
		return req != nil && req.Name == er.DrainRequestName(&asked) && req.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentWithdrawn ||
			ev != nil && ev.Name == asked.Name &&
				condition(ev, lifecyclev1alpha1.EvictionConditionFailed) == string(lifecyclev1alpha1.EvictionConditionReasonCanceledDueToNoRequesters)
	}, 2)
	if w.pod(asked) == nil {
		t.Fatal("the pod was evicted after the drain was cancelled")
	}
	w.waitUncordoned()

	// Asked again, it goes once its responder completes; the other pod
	// waits for the PDB.
	w.drain()
	w.waitEviction(asked, "asked again, its responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	w.respond(asked, backup, func(s *lifecyclev1alpha1.ResponderStatus) { s.CompletionTime, s.Message = now(), ptr.To("moved") })
	w.waitEviction(asked, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return condition(ev, lifecyclev1alpha1.EvictionConditionTargetEvicted) != ""
	})
	other := w.pods[0]
	if other.UID == asked.UID {
		other = w.pods[1]
	}
	nd := w.waitBlocker(other, "")
	if b := blockerOf(nd, other); b.Reason != v1alpha1.BlockerPDB {
		t.Errorf("the other pod is blocked by %s (%s), want the PDB", b.Reason, b.Detail)
	}
	if reqs := w.drainRequests(); len(reqs) != 1 || reqs[0].Spec.Target.Pod.UID != asked.UID {
		t.Errorf("the drain asked for %d pod(s), want only the first (the PDB allows no other disruption)", len(reqs))
	}

	// A node for the replacement: the PDB allows a disruption again, the
	// first pod's budget is free (it left), and the drain asks for the
	// other; once its responder completes, the node is drained.
	testenv.Nodes(t, w.c, devcluster.NodeSet{Prefix: "er2-" + w.ns[strings.LastIndex(w.ns, "-")+1:], Count: 1, Labels: map[string]string{"pool": "er-" + w.ns}})
	w.waitEviction(other, "the other asked, its responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	w.respond(other, backup, func(s *lifecyclev1alpha1.ResponderStatus) { s.CompletionTime, s.Message = now(), ptr.To("moved") })
	testenv.WaitForDrain(t, w.cl, w.node, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	}, testenv.DescribeDrain)
	for _, name := range squatted {
		req, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || req.Spec.Intent != lifecyclev1alpha1.EvictionRequestIntentWithdrawn || len(req.OwnerReferences) > 0 {
			t.Errorf("the request that took the drain's name %s was changed: %+v (%v)", name, req, err)
		}
	}
}

// squat makes, as a tenant who may evict the pods would, a withdrawn
// request of their own under the name the drains give theirs, for each
// responder pod: the drain must not take it for its own.
func (w *drainWorld) squat() []string {
	w.t.Helper()
	var names []string
	for _, p := range w.pods {
		req := &lifecyclev1alpha1.EvictionRequest{
			ObjectMeta: metav1.ObjectMeta{Name: er.DrainRequestName(&p), Namespace: w.ns},
			Spec: lifecyclev1alpha1.EvictionRequestSpec{
				Target:    lifecyclev1alpha1.EvictionRequestTarget{Pod: &lifecyclev1alpha1.EvictionRequestPodReference{Name: p.Name, UID: p.UID}},
				Requester: "tenant.example.com/squat", Intent: lifecyclev1alpha1.EvictionRequestIntentWithdrawn,
			},
		}
		if _, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
		names = append(names, req.Name)
	}
	return names
}

// newDrainWorld starts the controller, the responder pods and two plain
// pods on the node.
func newDrainWorld(t *testing.T) *drainWorld {
	w := &drainWorld{world: newWorld(t, 2, "1", func(d *appsv1.Deployment) {
		// The node's pool, not the node: a replacement may run on another.
		d.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "er-" + d.Namespace}
	})}
	w.cl = testenv.DrainClient(t, w.c)
	ctx := testenv.Context(t)
	dep := devcluster.Deployment(w.ns, "plain", 2)
	dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: w.node}
	if _, err := w.cs.AppsV1().Deployments(w.ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, w.cs, w.ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "plain"}), 2, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w.plain = pods
	t.Cleanup(func() {
		_ = w.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: w.node}})
	})
	return w
}

// drain requests the node's drain, and waits until the plain pods are gone
// with no request for them.
func (w *drainWorld) drain() {
	w.t.Helper()
	if err := requests.Apply(testenv.Context(w.t), w.cl, w.node, v1alpha1.Requester{Name: "cli:test", Reason: "kernel upgrade"}, "", ""); err != nil {
		w.t.Fatal(err)
	}
	for _, p := range w.plain {
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return w.pod(p) == nil, nil
		})
		if err != nil {
			w.t.Fatalf("plain pod %s not evicted: %v", p.Name, err)
		}
	}
	for _, r := range w.drainRequests() {
		if r.Spec.Target.Pod.Name != w.pods[0].Name && r.Spec.Target.Pod.Name != w.pods[1].Name {
			w.t.Errorf("the drain asked for pod %s with an EvictionRequest; it declares no responder", r.Spec.Target.Pod.Name)
		}
	}
}

// drainRequests are the EvictionRequests of the drain's requester that ask.
func (w *drainWorld) drainRequests() []lifecyclev1alpha1.EvictionRequest {
	w.t.Helper()
	list, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	var out []lifecyclev1alpha1.EvictionRequest
	for _, r := range list.Items {
		if r.Spec.Requester == er.DrainRequester && r.Spec.Intent == lifecyclev1alpha1.EvictionRequestIntentEviction {
			out = append(out, r)
		}
	}
	return out
}

// waitAsked waits until the drain asks for n pods, and returns the first.
func (w *drainWorld) waitAsked(n int) corev1.Pod {
	w.t.Helper()
	var got []lifecyclev1alpha1.EvictionRequest
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = w.drainRequests()
		return len(got) >= n, nil
	})
	if err != nil {
		w.t.Fatalf("the drain asked for %d pods, want %d: %v", len(got), n, err)
	}
	r := got[0]
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Kind != "NodeDrain" || r.OwnerReferences[0].Name != w.node {
		w.t.Errorf("the drain's request is owned by %+v, want its NodeDrain", r.OwnerReferences)
	}
	for _, p := range w.pods {
		if p.UID == r.Spec.Target.Pod.UID {
			return p
		}
	}
	w.t.Fatalf("the drain asked for pod %s, not one of the responder pods", r.Spec.Target.Pod.Name)
	return corev1.Pod{}
}

// writes are the EvictionRequests and Evictions of the namespace as a
// watch sees each of their writes.
type writes struct {
	requests, evictions watch.Interface
}

// watchWrites starts watching the namespace's EvictionRequests and
// Evictions.
func (w *drainWorld) watchWrites() *writes {
	w.t.Helper()
	ctx := testenv.Context(w.t)
	reqs, err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	evs, err := w.cs.LifecycleV1alpha1().Evictions(w.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { reqs.Stop(); evs.Stop() })
	return &writes{requests: reqs, evictions: evs}
}

// waitFor waits until n different writes matched (each call of match gets
// one request or one Eviction, the other nil; one match counts once per
// kind).
func (ws *writes) waitFor(t *testing.T, what string, match func(*lifecyclev1alpha1.EvictionRequest, *lifecyclev1alpha1.Eviction) bool, n int) {
	t.Helper()
	timeout := time.After(time.Minute)
	kinds := map[string]bool{}
	for len(kinds) < n {
		select {
		case e := <-ws.requests.ResultChan():
			if req, ok := e.Object.(*lifecyclev1alpha1.EvictionRequest); ok && match(req, nil) {
				kinds["request"] = true
			}
		case e := <-ws.evictions.ResultChan():
			if ev, ok := e.Object.(*lifecyclev1alpha1.Eviction); ok && match(nil, ev) {
				kinds["eviction"] = true
			}
		case <-timeout:
			t.Fatalf("%s: seen only %v", what, kinds)
		}
	}
}

// waitBlocker waits until the drain's status lists the pod as blocked, with
// detail in the blocker's.
func (w *drainWorld) waitBlocker(p corev1.Pod, detail string) *v1alpha1.NodeDrain {
	w.t.Helper()
	return testenv.WaitForDrain(w.t, w.cl, w.node, "pod "+p.Name+" blocked: "+detail, time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b := blockerOf(nd, p)
		return b.Reason != "" && strings.Contains(b.Detail, detail)
	}, testenv.DescribeDrain)
}

func blockerOf(nd *v1alpha1.NodeDrain, p corev1.Pod) v1alpha1.Blocker {
	for _, b := range nd.Status.Blockers {
		if b.Pod == p.Namespace+"/"+p.Name {
			return b
		}
	}
	return v1alpha1.Blocker{}
}

// waitUncordoned waits until the cancelled drain gave the node back.
func (w *drainWorld) waitUncordoned() {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := w.cs.CoreV1().Nodes().Get(ctx, w.node, metav1.GetOptions{})
		return err == nil && !n.Spec.Unschedulable, client.IgnoreNotFound(err)
	})
	if err != nil {
		w.t.Fatalf("node %s still cordoned after the cancel: %v", w.node, err)
	}
}

// vacate runs the CLI and returns what it printed.
func (w *drainWorld) vacate(args ...string) string {
	w.t.Helper()
	var out, errOut bytes.Buffer
	args = append(args, "--kubeconfig", w.c.Kubeconfig)
	code := cli.Run(testenv.Context(w.t), args, cli.Streams{In: io.MultiReader(), Out: &out, Err: &errOut}, clock.RealClock{})
	w.t.Logf("$ vacate %s → %d\n%s%s", strings.Join(args[:len(args)-2], " "), code, out.String(), errOut.String())
	if code != 0 {
		w.t.Fatalf("vacate %s failed", args[0])
	}
	return out.String()
}

// condition is the reason of the Eviction's condition t if it is True.
func condition(ev *lifecyclev1alpha1.Eviction, t lifecyclev1alpha1.EvictionConditionType) string {
	for _, c := range ev.Status.Conditions {
		if c.Type == string(t) && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// TestTheCoordinatorLeavesADrainsBudgetAlone: a drain asked for one of two
// pods behind a PDB of maxUnavailable 1 (its EvictionRequest takes the
// PDB's one disruption while the pod's responder works). A descheduler
// then asks for the other pod; once that pod's responder completes, the
// PDB alone would allow its eviction, but the drain's pod has the budget:
// the evictor waits and says why, and the pod stays. When the drain's pod
// is gone and its replacement runs elsewhere, the other pod is evicted.
func TestTheCoordinatorLeavesADrainsBudgetAlone(t *testing.T) {
	w := newDrainWorld(t)
	w.drain()
	asked := w.waitAsked(1)
	other := w.pods[0]
	if other.UID == asked.UID {
		other = w.pods[1]
	}
	w.request(other, "rebalance-budget")
	w.waitEviction(other, "its responder has the turn", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, backup) == lifecyclev1alpha1.ResponderStateActive
	})
	w.respond(other, backup, func(s *lifecyclev1alpha1.ResponderStatus) { s.CompletionTime, s.Message = now(), ptr.To("moved") })
	ev := w.waitEviction(other, "the evictor waits for the drain's budget", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, er.Evictor) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, er.Evictor), "taken by evictions already underway")
	})
	time.Sleep(2 * time.Second) // passes come and go
	if p := w.pod(other); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted with the budget the drain took:\n%s", describe(ev))
	}
	if n := w.acceptedEvictions(other); n != 0 {
		t.Fatalf("%d evictions of the pod were accepted while the drain's pod had the budget", n)
	}

	w.respond(asked, backup, func(s *lifecyclev1alpha1.ResponderStatus) { s.CompletionTime, s.Message = now(), ptr.To("moved") })
	w.waitEviction(asked, "the drain's pod evicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return condition(ev, lifecyclev1alpha1.EvictionConditionTargetEvicted) != ""
	})
	testenv.Nodes(t, w.c, devcluster.NodeSet{Prefix: "er3-" + w.ns[strings.LastIndex(w.ns, "-")+1:], Count: 1, Labels: map[string]string{"pool": "er-" + w.ns}})
	w.waitEviction(other, "evicted once the budget is free", func(ev *lifecyclev1alpha1.Eviction) bool {
		return condition(ev, lifecyclev1alpha1.EvictionConditionTargetEvicted) != ""
	})
}
