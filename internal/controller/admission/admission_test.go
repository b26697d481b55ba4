package admission_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/admission"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/schedule"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// errKilled is what every write of a "killed" controller gets: nothing it
// would have written after its death reaches the API server.
var errKilled = errors.New("the controller was killed")

// runAdmission runs the admission controller alone (no NodeDrain controller:
// an admitted drain stays admitted, so only admission moves the drains).
// wrap, if set, wraps its client.
func runAdmission(t *testing.T, c *devcluster.Cluster, wrap func(client.WithWatch) client.WithWatch) (stop func()) {
	t.Helper()
	return testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		if err := index.RegisterAll(context.Background(), mgr); err != nil {
			return err
		}
		cl := mgr.GetClient()
		if wrap != nil {
			cl = wrap(withoutWatch{cl})
		}
		r := &admission.Reconciler{Client: cl, APIReader: mgr.GetAPIReader(), Clock: clock.RealClock{}, Events: mgr.GetEventRecorder("vacate-test")}
		return r.SetupWithManager(mgr)
	})
}

// withoutWatch lets the interceptor wrap a manager's client, which watches
// through its cache only.
type withoutWatch struct{ client.Client }

func (withoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("the manager's client does not watch")
}

// admissionWatch follows the drains of a set of nodes and records, at every
// event, how many hold an admission, and the order in which they got it.
type admissionWatch struct {
	mu         sync.Mutex
	admitted   map[string]bool
	order      []string
	maxAtOnce  int
	violations []string
	stop       func()
}

func watchAdmissions(t *testing.T, cl client.Client, nodes []string, limit int) *admissionWatch {
	t.Helper()
	ours := map[string]bool{}
	for _, n := range nodes {
		ours[n] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cl.(client.WithWatch).Watch(ctx, &v1alpha1.NodeDrainList{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	aw := &admissionWatch{admitted: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			nd, ok := ev.Object.(*v1alpha1.NodeDrain)
			if !ok || !ours[nd.Name] {
				continue
			}
			aw.observe(ev.Type, nd, limit)
		}
	}()
	var once sync.Once
	aw.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(aw.stop)
	return aw
}

func (aw *admissionWatch) observe(typ watch.EventType, nd *v1alpha1.NodeDrain, limit int) {
	aw.mu.Lock()
	defer aw.mu.Unlock()
	now := typ != watch.Deleted && nd.Running() && nd.Admitted()
	if now && !aw.admitted[nd.Name] {
		aw.order = append(aw.order, nd.Name)
	}
	if now {
		aw.admitted[nd.Name] = true
	} else {
		delete(aw.admitted, nd.Name)
	}
	aw.maxAtOnce = max(aw.maxAtOnce, len(aw.admitted))
	if len(aw.admitted) > limit {
		aw.violations = append(aw.violations, fmt.Sprintf("%d drains admitted at once, at most %d allowed", len(aw.admitted), limit))
	}
}

func (aw *admissionWatch) check(t *testing.T) []string {
	t.Helper()
	aw.mu.Lock()
	defer aw.mu.Unlock()
	for _, v := range aw.violations {
		t.Error(v)
	}
	return append([]string(nil), aw.order...)
}

// queueState reads the drains: admitted ones sorted by name, and the
// waiting ones by queue position.
func queueState(t *testing.T, cl client.Client, nodes []string) (admitted, waiting []string, positions map[string]int32) {
	t.Helper()
	positions = map[string]int32{}
	for _, n := range nodes {
		nd := &v1alpha1.NodeDrain{}
		if err := cl.Get(testenv.Context(t), client.ObjectKey{Name: n}, nd); err != nil {
			t.Fatal(err)
		}
		if !nd.Running() {
			continue
		}
		if nd.Admitted() {
			admitted = append(admitted, n)
			continue
		}
		waiting = append(waiting, n)
		positions[n] = nd.Status.QueuePosition
	}
	sort.Strings(admitted)
	sort.Slice(waiting, func(i, j int) bool { return positions[waiting[i]] < positions[waiting[j]] })
	return admitted, waiting, positions
}

// requestOrder is the order admission serves the drains in: by
// status.requestTime, then by name.
func requestOrder(t *testing.T, cl client.Client, nodes []string) []string {
	t.Helper()
	at := map[string]time.Time{}
	for _, n := range nodes {
		nd := &v1alpha1.NodeDrain{}
		if err := cl.Get(testenv.Context(t), client.ObjectKey{Name: n}, nd); err != nil {
			t.Fatal(err)
		}
		if nd.Status.RequestTime == nil {
			t.Fatalf("NodeDrain %s has no status.requestTime: admission has not seen it", n)
		}
		at[n] = nd.Status.RequestTime.Time
	}
	out := append([]string(nil), nodes...)
	sort.Slice(out, func(i, j int) bool {
		if !at[out[i]].Equal(at[out[j]]) {
			return at[out[i]].Before(at[out[j]])
		}
		return out[i] < out[j]
	})
	return out
}

// killAfterFirstAdmission wraps a controller's client so that the
// controller "dies" right after its first admission reaches the API
// server: every later write fails, as if the process were gone.
func killAfterFirstAdmission(dead *atomic.Bool) func(client.WithWatch) client.WithWatch {
	write := func() error {
		if dead.Load() {
			return errKilled
		}
		return nil
	}
	return func(cl client.WithWatch) client.WithWatch {
		return interceptor.NewClient(cl, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				if err := write(); err != nil {
					return err
				}
				return c.Create(ctx, o, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				if err := write(); err != nil {
					return err
				}
				return c.Update(ctx, o, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				if err := write(); err != nil {
					return err
				}
				return c.Patch(ctx, o, p, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if err := write(); err != nil {
					return err
				}
				if err := c.SubResource(sub).Patch(ctx, o, p, opts...); err != nil {
					return err
				}
				if nd, ok := o.(*v1alpha1.NodeDrain); ok && nd.Admitted() {
					dead.Store(true)
				}
				return nil
			},
		})
	}
}

// TestAdmissionSurvivesKillAndRestart: six drains requested together under
// maxParallelNodes 3. The first controller is killed right after its first
// admission reached the API server, in the middle of a pass that admits
// three. A new controller, with a cache of its own, admits the other two of
// those three, in the same order, and no more; restarted again while drains
// are queued, it keeps the same admissions and queue; when a drain ends, the
// first in the queue starts. A watch checks at every change that no more
// than three drains ever hold an admission.
func TestAdmissionSurvivesKillAndRestart(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	const limit = 3
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "adm", Count: 7, Labels: map[string]string{"fleet": "adm"}})
	if err := cl.Create(ctx, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "adm"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(limit))},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a later run in the same cluster (-count) creates it again
		_ = cl.Delete(context.Background(), &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adm"}})
	})
	first, extra := nodes[:6], nodes[6]
	aw := watchAdmissions(t, cl, nodes, limit)

	var dead atomic.Bool
	stop1 := runAdmission(t, c, killAfterFirstAdmission(&dead))
	for _, n := range first {
		request(t, cl, n)
	}
	testutil.Eventually(t, 2*time.Minute, "the first controller to admit one drain and die", testutil.Seen(func() (bool, string) {
		return dead.Load(), "no admission written yet"
	}))
	stop1()
	admitted, _, _ := queueState(t, cl, first)
	if len(admitted) != 1 {
		t.Fatalf("after the kill %d drains are admitted (%v), want the 1 written before it", len(admitted), admitted)
	}
	order := requestOrder(t, cl, first)
	t.Logf("request order %v; admitted before the kill: %v", order, admitted)
	if admitted[0] != order[0] {
		t.Errorf("the first controller admitted %s first, want %s (the earliest request)", admitted[0], order[0])
	}

	t.Log("starting a second controller")
	stop2 := runAdmission(t, c, nil)
	want := append([]string(nil), order[:limit]...)
	sort.Strings(want)
	testutil.Eventually(t, 2*time.Minute, "the second controller to fill the slots", testutil.Seen(func() (bool, string) {
		admitted, waiting, pos := queueState(t, cl, first)
		return len(admitted) == limit && len(waiting) == len(first)-limit && pos[waiting[0]] == 1,
			fmt.Sprintf("admitted %v, waiting %v at %v", admitted, waiting, pos)
	}))
	admitted, waiting, positions := queueState(t, cl, first)
	if strings.Join(admitted, ",") != strings.Join(want, ",") {
		t.Errorf("admitted %v after the restart, want the first %d requested: %v", admitted, limit, want)
	}
	if strings.Join(waiting, ",") != strings.Join(order[limit:], ",") {
		t.Errorf("queue %v (positions %v), want %v in request order", waiting, positions, order[limit:])
	}

	t.Log("restarting while drains are queued; a seventh drain makes the new controller compute the queue")
	stop2()
	runAdmission(t, c, nil)
	request(t, cl, extra)
	testutil.Eventually(t, 2*time.Minute, "the seventh drain to be queued", testutil.Seen(func() (bool, string) {
		nd := &v1alpha1.NodeDrain{}
		if err := cl.Get(ctx, client.ObjectKey{Name: extra}, nd); err != nil {
			return false, err.Error()
		}
		cnd := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
		return cnd != nil && cnd.Reason == schedule.WaitingForSlot, fmt.Sprintf("conditions %+v", nd.Status.Conditions)
	}))
	// The new controller writes the queue's positions drain by drain: a
	// read between two writes sees some old, some new.
	wantQueue := strings.Join(append(order[limit:], extra), ",")
	testutil.Eventually(t, time.Minute, "the queue to be written in request order", testutil.Seen(func() (bool, string) {
		_, waitingAgain, _ := queueState(t, cl, nodes)
		return strings.Join(waitingAgain, ",") == wantQueue, fmt.Sprintf("queue %v", waitingAgain)
	}))
	again, _, _ := queueState(t, cl, nodes)
	if strings.Join(again, ",") != strings.Join(want, ",") {
		t.Errorf("admitted %v after the second restart, want %v unchanged", again, want)
	}

	t.Logf("ending %s: the first in the queue, %s, takes its slot", order[0], order[limit])
	withdraw(t, cl, order[0])
	testutil.Eventually(t, 2*time.Minute, order[limit]+" admitted", testutil.Seen(func() (bool, string) {
		admitted, waiting, pos := queueState(t, cl, nodes)
		return len(admitted) == limit && strings.Contains(","+strings.Join(admitted, ",")+",", ","+order[limit]+","),
			fmt.Sprintf("admitted %v, waiting %v at %v", admitted, waiting, pos)
	}))
	aw.stop()
	got := aw.check(t)
	wantOrder := order[:limit+1]
	if strings.Join(got[:min(len(got), len(wantOrder))], ",") != strings.Join(wantOrder, ",") {
		t.Errorf("drains admitted in the order %v, want %v", got, wantOrder)
	}
}

// request asks for a drain of the node, as a person's CLI would, with the
// finalizer the NodeDrain controller (not run here) adds before anything
// else: admission leaves a drain without it alone. The drain is removed
// when the test ends (an admitted drain of a deleted node would hold a slot
// in every queue of the later tests).
func request(t *testing.T, cl client.Client, node string) {
	t.Helper()
	t.Cleanup(func() { removeDrain(cl, node) })
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node, Finalizers: []string{v1alpha1.FinalizerRestore}}, Spec: v1alpha1.NodeDrainSpec{
		NodeName: node, Requesters: []v1alpha1.Requester{{Name: "cli:test", Reason: "admission test"}}}}
	if err := cl.Create(testenv.Context(t), nd); err != nil {
		t.Fatal(err)
	}
}

// withdraw removes every requester: the drain no longer runs.
func withdraw(t *testing.T, cl client.Client, node string) {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(testenv.Context(t), client.ObjectKey{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(nd.DeepCopy())
	nd.Spec.Requesters = nil
	if err := cl.Patch(testenv.Context(t), nd, patch); err != nil {
		t.Fatal(err)
	}
}

// removeDrain deletes the node's drain and releases its finalizer, which no
// NodeDrain controller runs here to release.
func removeDrain(cl client.Client, node string) {
	ctx := context.Background()
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(ctx, client.ObjectKey{Name: node}, nd); err != nil {
		return
	}
	_ = cl.Delete(ctx, nd)
	patch := client.MergeFrom(nd.DeepCopy())
	nd.Finalizers = nil
	_ = cl.Patch(ctx, nd, patch)
}
