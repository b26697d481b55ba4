package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/coordinator"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	er "github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
)

// hookApp is a pod's HTTP evacuation hook (protocol v1), served on the
// simulated pod's own loopback address: it records the POSTs and answers
// GETs with state.
type hookApp struct {
	mu      sync.Mutex
	state   string
	posts   []map[string]any
	deletes int
	// firstPost is when the first POST came.
	firstPost time.Time
}

func (a *hookApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Method == http.MethodDelete {
		a.deletes++
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Method == http.MethodPost {
		body := map[string]any{}
		_ = json.NewDecoder(r.Body).Decode(&body)
		a.posts = append(a.posts, body)
		if a.firstPost.IsZero() {
			a.firstPost = time.Now()
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"state":%q,"message":"forwarding stored messages","remaining":%d}`, a.state, map[bool]int{true: 0, false: 120}[a.state == hook.Completed])
}

func (a *hookApp) set(state string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state = state
}

func (a *hookApp) posted() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.posts...)
}

// TestVacateAnswersAsAResponder: a broker's pod declares vacate's responder
// and its HTTP hook; a descheduler (the test) asks for its eviction. In
// vacate's turn its hook is POSTed (for the pod's node) and polled; the pod
// stays while the hook answers InProgress, vacate heartbeats with the hook's
// message; once the hook answers Completed, vacate's turn completes and the
// evictor evicts the pod, within its PodDisruptionBudget (tightened
// meanwhile: the evictor waits, and says so, until it allows). The Eviction
// and the request end TargetEvicted.
func TestVacateAnswersAsAResponder(t *testing.T) {
	w, target, app := hookedWorld(t, 18091)
	req := w.request(target, "rebalance-5")
	ev := w.waitEviction(target, "vacate's turn, the hook in progress", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, coordinator.Responder), "InProgress: forwarding stored messages (120 remaining)")
	})
	time.Sleep(2 * time.Second) // passes come and go while the hook works
	if p := w.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted while its hook was in progress:\n%s", describe(ev))
	}
	posts := app.posted()
	if len(posts) == 0 || posts[0]["node"] != target.Spec.NodeName || posts[0]["mode"] != string(v1alpha1.ModeMaintenance) {
		t.Errorf("the hook's POSTs %v: want one for the pod's node %s in Maintenance", posts, target.Spec.NodeName)
	}

	w.setMaxUnavailable(0)
	app.set(hook.Completed)
	ev = w.waitEviction(target, "the hook completed, the evictor waits on the PDB", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateCompleted && strings.Contains(message(ev, er.Evictor), "PDBBlocked")
	})
	if p := w.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod was evicted past a PDB that allows nothing:\n%s", describe(ev))
	}
	w.setMaxUnavailable(1)
	ev = w.waitEviction(target, "TargetEvicted", func(ev *lifecyclev1alpha1.Eviction) bool {
		return meta.IsStatusConditionTrue(ev.Status.Conditions, string(lifecyclev1alpha1.EvictionConditionTargetEvicted))
	})
	if state(ev, coordinator.Responder) != lifecyclev1alpha1.ResponderStateCompleted || !strings.Contains(message(ev, coordinator.Responder), "Completed") ||
		state(ev, er.Evictor) != lifecyclev1alpha1.ResponderStateCompleted {
		t.Errorf("at the end:\n%s\nwant vacate's turn Completed with the hook's answer, then the evictor's", describe(ev))
	}
	w.waitRequestEvicted(req)
}

// TestACancelledEvictionCancelsTheHook: when the only request is deleted
// while vacate's hook is in progress, the garbage collector deletes the
// Eviction with it; vacate's finalizer keeps it until vacate has undone
// what it started, as a cancelled drain does: the hook gets its DELETE, then
// the Eviction goes. The pod stays.
func TestACancelledEvictionCancelsTheHook(t *testing.T) {
	w, target, app := hookedWorld(t, 18092)
	req := w.request(target, "rebalance-7")
	ev := w.waitEviction(target, "vacate's turn, the hook in progress", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, coordinator.Responder), "InProgress")
	})
	if !slices.Contains(ev.Finalizers, coordinator.FinalizerHook) {
		t.Errorf("the Eviction's finalizers %v, want %s while the hook works", ev.Finalizers, coordinator.FinalizerHook)
	}
	if err := w.cs.LifecycleV1alpha1().EvictionRequests(w.ns).Delete(testenv.Context(t), req.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := w.cs.LifecycleV1alpha1().Evictions(w.ns).Get(ctx, target.Name, metav1.GetOptions{})
		app.mu.Lock()
		defer app.mu.Unlock()
		if apierrors.IsNotFound(err) && app.deletes == 0 {
			return false, fmt.Errorf("the Eviction went before the hook got its DELETE")
		}
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the cancel: %v", err)
	}
	if p := w.pod(target); p == nil || p.DeletionTimestamp != nil {
		t.Error("the pod was evicted after its only request went")
	}
}

// hookedWorld is a broker of one pod that declares vacate's responder and
// its HTTP hook on port (served on the pod's address, answering
// InProgress), on a node whose policy calls hooks, with vacate's
// controller running. The pod declares the other responders too.
func hookedWorld(t *testing.T, port int, others ...corev1.EvictionResponder) (*world, corev1.Pod, *hookApp) {
	t.Helper()
	w := newWorld(t, 1, "1", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.EvictionResponders = append(others, corev1.EvictionResponder{Name: coordinator.Responder, Priority: ptr.To[int32](5000)})
		d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
	})
	// The pod's node is under a policy that calls HTTP hooks.
	admin := testenv.DrainClient(t, w.c)
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hooks-" + w.ns}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "er-" + w.ns}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}}
	if err := admin.Create(testenv.Context(t), dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), dp) })
	target := w.pods[0]
	app := &hookApp{state: hook.InProgress}
	ln, err := net.Listen("tcp", net.JoinHostPort(target.Status.PodIP, fmt.Sprint(port)))
	if err != nil {
		t.Fatalf("listening on the pod's IP: %v", err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return w, target, app
}

// TestADrainLeavesVacatesHookToItsTurn: a vacate drain of the node of a pod
// that declares vacate's responder and its HTTP hook asks for the pod with
// an EvictionRequest and does not call the hook itself: every POST the
// hook gets is the coordinator's, for the pod's Eviction (the drain field
// is the Eviction's UID, not the NodeDrain's). Once the hook completes, the
// pod is evicted and the drain ends Drained.
func TestADrainLeavesVacatesHookToItsTurn(t *testing.T) {
	w, target, app := hookedWorld(t, 18093)
	dw := &drainWorld{world: w, cl: testenv.DrainClient(t, w.c)}
	t.Cleanup(func() {
		_ = dw.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: w.node}})
	})
	dw.drain()
	dw.waitBlocker(target, "")
	ev := w.waitEviction(target, "vacate's turn, the hook in progress", func(ev *lifecyclev1alpha1.Eviction) bool {
		return state(ev, coordinator.Responder) == lifecyclev1alpha1.ResponderStateActive && strings.Contains(message(ev, coordinator.Responder), "InProgress")
	})
	nd := dw.waitBlocker(target, "responder "+coordinator.Responder+" has the turn")
	time.Sleep(2 * time.Second) // the drain's passes come and go while the hook works
	for _, p := range app.posted() {
		if p["drain"] != string(ev.UID) {
			t.Errorf("the hook got a POST for %v, want only the coordinator's (Eviction %s; the NodeDrain is %s)", p["drain"], ev.UID, nd.UID)
		}
	}
	if len(app.posted()) == 0 {
		t.Error("the hook got no POST")
	}
	app.set(hook.Completed)
	testenv.WaitForDrain(t, dw.cl, w.node, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	}, testenv.DescribeDrain)
	if n := w.acceptedEvictions(target); n != 1 {
		t.Errorf("the pod was evicted %d times, want once", n)
	}
}
