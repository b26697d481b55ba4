package replicatedvolume_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	rv "github.com/vacate-dev/vacate/examples/replicated-volume"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// Fixed names these tests check, spelled out so the tests also build on
// code from before they existed.
const (
	finalizerEvacuations = "vacate.dev/evacuations" // on EvacuationProviders
	finalizerNodeDrain   = "vacate.dev/drain"       // on Nodes, with onNodeDelete: Drain
	blockerEvacuation    = "Evacuation"
)

// gate stands between a Runner and a provider: while paused, Evacuate
// reports InProgress and does nothing, so what the provider has done is
// frozen while the test changes the cluster; every Cancel call is recorded.
type gate struct {
	evacuation.Provider

	mu      sync.Mutex
	paused  bool
	cancels []string
	// running is held while a call runs in the provider.
	running sync.Mutex
}

func (g *gate) Evacuate(ctx context.Context, node string, mode v1alpha1.DrainMode) (evacuation.Progress, error) {
	g.mu.Lock()
	if g.paused {
		g.mu.Unlock()
		return evacuation.Progress{Remaining: 1, Message: "held by the test"}, nil
	}
	g.running.Lock()
	g.mu.Unlock()
	defer g.running.Unlock()
	return g.Provider.Evacuate(ctx, node, mode)
}

func (g *gate) Cancel(ctx context.Context, node string) (evacuation.Progress, error) {
	g.mu.Lock()
	g.cancels = append(g.cancels, node)
	g.mu.Unlock()
	return g.Provider.Cancel(ctx, node)
}

// pause returns once no call runs in the provider and none will start.
func (g *gate) pause() {
	g.mu.Lock()
	g.paused = true
	g.mu.Unlock()
	g.running.Lock()
	defer g.running.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = false
}

func (g *gate) cancelCalls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.cancels)
}

// safety is an env whose providers run behind gates and place new replicas
// only on the pool's nodes that are neither cordoned nor being deleted.
type safety struct {
	*env
	prefix           string
	mover, cleaner   *gate
	moverP, cleanerP string // EvacuationProvider names
}

func startSafety(t *testing.T, prefix string, nodes int) *safety {
	t.Helper()
	c := testenv.Start(t)
	s := &safety{env: &env{c: c, cl: testenv.Controller(t, c), ns: testenv.Namespace(t, c), store: &rv.Store{Root: t.TempDir()}},
		prefix: prefix, moverP: prefix + "-volumes", cleanerP: prefix + "-cleanup"}
	s.nodes = testenv.Nodes(t, c, devcluster.NodeSet{Prefix: prefix, Count: nodes, Labels: map[string]string{"pool": prefix}})
	ctx := testenv.Context(t)
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, s.ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: prefix + "-app"}}
	for name, stage := range map[string]v1alpha1.EvacuationStage{s.moverP: v1alpha1.StageBeforeEviction, s.cleanerP: v1alpha1.StageAfterEviction} {
		p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.EvacuationProviderSpec{PodSelector: sel, Stage: stage, Timeout: &metav1.Duration{Duration: 10 * time.Second}}}
		if err := s.cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.forget(p.Name) })
	}
	testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		inUse := rv.PodsInUse(mgr.GetClient())
		// One copy per call (the budget is spent by the first copy's pause).
		m := &rv.Mover{Store: s.store, InUse: inUse, CopyDelay: 100 * time.Millisecond, Budget: 50 * time.Millisecond,
			Nodes: placeable(mgr.GetClient(), prefix)}
		s.mover = &gate{Provider: m}
		s.cleaner = &gate{Provider: &rv.Cleaner{Store: s.store, InUse: inUse}}
		for name, p := range map[string]evacuation.Provider{s.moverP: s.mover, s.cleanerP: s.cleaner} {
			r := &evacuation.Runner{Client: mgr.GetClient(), Name: name, Provider: p, Heartbeat: 200 * time.Millisecond}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
		}
		return nil
	})
	return s
}

// placeable are the pool's nodes a new replica may go to: not cordoned, not
// being deleted (the Mover also skips the nodes it evacuates).
func placeable(c client.Reader, pool string) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		list := &corev1.NodeList{}
		if err := c.List(ctx, list, client.MatchingLabels{"pool": pool}); err != nil {
			return nil, err
		}
		var out []string
		for _, n := range list.Items {
			if n.DeletionTimestamp.IsZero() && !n.Spec.Unschedulable {
				out = append(out, n.Name)
			}
		}
		sort.Strings(out)
		return out, nil
	}
}

// forget deletes a provider at the end of a test, finalizer and all, so
// nothing is left for the package's other tests.
func (s *safety) forget(name string) {
	ctx := context.Background()
	p := &v1alpha1.EvacuationProvider{}
	if s.cl.Get(ctx, types.NamespacedName{Name: name}, p) != nil {
		return
	}
	_ = s.cl.Delete(ctx, p)
	if controllerutil.RemoveFinalizer(p, finalizerEvacuations) {
		_ = s.cl.Update(ctx, p)
	}
}

// replicaCounts are the volumes' replica counts now.
func (s *safety) replicaCounts(t *testing.T, data map[string][]byte) map[string]int {
	t.Helper()
	l, err := s.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for name := range data {
		out[name] = len(l.Volumes[name].Replicas)
	}
	return out
}

func names(data map[string][]byte) []string {
	out := make([]string, 0, len(data))
	for name := range data {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// movedOff counts the volumes with a replica on node whose new replica
// the Mover has copied for node's drain (checksum verified), and the
// volumes with a replica on node.
func (s *safety) movedOff(node string) (copied, total int, err error) {
	l, err := s.store.Load()
	if err != nil {
		return 0, 0, err
	}
	for name, v := range l.Volumes {
		if !slices.Contains(v.Replicas, node) {
			continue
		}
		total++
		if slices.ContainsFunc(l.Added[node], func(mv rv.Move) bool { return mv.Volume == name && s.store.Verify(l, mv.To, name) }) {
			copied++
		}
	}
	return copied, total, nil
}

// upToDateElsewhere reports whether volume has a replica with its data on
// a node other than node.
func upToDateElsewhere(st *rv.Store, l *rv.Layout, volume, node string) bool {
	v := l.Volumes[volume]
	if v == nil {
		return false
	}
	for _, n := range v.Replicas {
		if n != node && st.Verify(l, n, volume) {
			return true
		}
	}
	return false
}

// pauseMidway waits until at least two of the volumes on node have been
// copied off by the Mover, then holds the Mover, and fails the test if the
// evacuation was already over.
func (s *safety) pauseMidway(t *testing.T, node string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		copied, _, err := s.movedOff(node)
		return err == nil && copied >= 2, nil
	})
	if err != nil {
		t.Fatal("the Mover never got under way")
	}
	s.mover.pause()
	copied, total, err := s.movedOff(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the Mover is held with %d of %d volume(s) on %s copied off", copied, total, node)
	if copied == total {
		t.Fatal("every volume was copied before the Mover was held: not mid-evacuation")
	}
}

// podGuard checks a condition at the moment each pod of a namespace starts
// terminating (or is deleted without having been seen terminating),
// through a watch: every pod, not samples.
type podGuard struct {
	mu         sync.Mutex
	seen       map[types.UID]bool
	violations []string
	stop       func()
}

func guardPods(t *testing.T, c *devcluster.Cluster, ns string, check func(*corev1.Pod) string) *podGuard {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	g := &podGuard{seen: map[types.UID]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || (ev.Type != watch.Deleted && p.DeletionTimestamp == nil) {
				continue
			}
			g.mu.Lock()
			if !g.seen[p.UID] {
				g.seen[p.UID] = true
				if v := check(p); v != "" {
					g.violations = append(g.violations, v)
				}
			}
			g.mu.Unlock()
		}
		if ctx.Err() == nil {
			g.mu.Lock()
			g.violations = append(g.violations, "the pod watch ended early: pods after that were not checked")
			g.mu.Unlock()
		}
	}()
	var once sync.Once
	g.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(g.stop)
	return g
}

// left is how many pods started terminating so far, and the violations
// (none for a nil guard).
func (g *podGuard) left() (int, []string) {
	if g == nil {
		return 0, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen), slices.Clone(g.violations)
}

// check stops the guard and fails the test for each violation, or if fewer
// than want pods left (then it proved less than it should).
func (g *podGuard) check(t *testing.T, want int) {
	t.Helper()
	g.stop()
	n, violations := g.left()
	if n < want {
		t.Errorf("the pod guard saw %d pod(s) leave, want at least %d", n, want)
	}
	for _, v := range violations[:min(len(violations), 10)] {
		t.Error(v)
	}
}

// movedFirst is the guard's check: a pod leaves its node only when every
// volume it uses has an up-to-date replica on another node.
func (s *safety) movedFirst(p *corev1.Pod) string {
	vols := p.Annotations[rv.AnnotationVolumes]
	if vols == "" || p.Spec.NodeName == "" {
		return ""
	}
	l, err := s.store.Load()
	if err != nil {
		return "reading the layout: " + err.Error()
	}
	var bare []string
	for _, v := range strings.Split(vols, ",") {
		if !upToDateElsewhere(s.store, l, v, p.Spec.NodeName) {
			bare = append(bare, fmt.Sprintf("%s (listed on %v)", v, l.Volumes[v].Replicas))
		}
	}
	if len(bare) == 0 {
		return ""
	}
	return fmt.Sprintf("pod %s left %s at %s while %d volume(s) it uses had no up-to-date replica on another node: %s",
		p.Name, p.Spec.NodeName, time.Now().Format(time.StampMilli), len(bare), strings.Join(bare, ", "))
}

// failIfLeft stops the test at once if a pod left early: waiting further
// would only time out with less to say.
func (g *podGuard) failIfLeft(t *testing.T, when string) {
	t.Helper()
	if n, violations := g.left(); n > 0 {
		t.Fatalf("%s, %d pod(s) left the node already: %v", when, n, violations)
	}
}

// checkAppStays: no pod has left yet, and want pods of the app are on
// node, each Ready and not terminating.
func (s *safety) checkAppStays(t *testing.T, g *podGuard, node string, want int, when string) {
	t.Helper()
	g.failIfLeft(t, when)
	n := 0
	for _, p := range testenv.PodsOnNode(t, s.c, node) {
		if p.Annotations[rv.AnnotationVolumes] == "" {
			continue
		}
		if p.DeletionTimestamp != nil || !devcluster.PodReady(&p) {
			t.Errorf("%s: pod %s on %s is terminating or not ready", when, p.Name, node)
		}
		n++
	}
	if n != want {
		t.Fatalf("%s: %d app pod(s) on %s, want %d", when, n, node, want)
	}
}

// waitDrain polls node's NodeDrain until cond holds, failing at once if a
// pod left early (g may be nil: pods may leave).
func (s *safety) waitDrain(t *testing.T, g *podGuard, node, what string, cond func(*v1alpha1.NodeDrain) bool) *v1alpha1.NodeDrain {
	t.Helper()
	ctx := testenv.Context(t)
	nd := &v1alpha1.NodeDrain{}
	testutil.Eventually(t, time.Minute, fmt.Sprintf("the drain of %s to be %s", node, what), func() error {
		if n, _ := g.left(); n > 0 {
			return nil
		}
		if s.cl.Get(ctx, types.NamespacedName{Name: node}, nd) == nil && cond(nd) {
			return nil
		}
		return fmt.Errorf("mode %s, phase %s, hooks %+v, blockers %+v", nd.Spec.Mode, nd.Status.Phase, nd.Status.Hooks, nd.Status.Blockers)
	})
	g.failIfLeft(t, "waiting for the drain to be "+what)
	return nd
}

// waitHeartbeats waits until the Evacuation has reported n more heartbeats
// (each a drain pass that judged it), failing at once if a pod left.
func (s *safety) waitHeartbeats(t *testing.T, g *podGuard, name string, n int) {
	t.Helper()
	ctx := testenv.Context(t)
	seen := map[string]bool{}
	first := true
	testutil.Eventually(t, time.Minute, fmt.Sprintf("Evacuation %s to report %d more heartbeats", name, n), func() error {
		if left, _ := g.left(); left > 0 {
			return nil
		}
		ev := &v1alpha1.Evacuation{}
		if s.cl.Get(ctx, types.NamespacedName{Name: name}, ev) != nil || ev.Status.HeartbeatTime == nil {
			return errors.New("no heartbeat")
		}
		hb := ev.Status.HeartbeatTime.UTC().String()
		if first {
			first = false
			seen[hb] = true // not counted: it may precede the change under test
		}
		if !seen[hb] {
			seen[hb] = true
			n--
		}
		if n > 0 {
			return fmt.Errorf("it stopped reporting: %d heartbeat(s) short", n)
		}
		return nil
	})
	g.failIfLeft(t, "while the Evacuation "+name+" kept reporting")
}

func (s *safety) evacuation(t *testing.T, node, provider string) (*v1alpha1.Evacuation, error) {
	t.Helper()
	ev := &v1alpha1.Evacuation{}
	err := s.cl.Get(testenv.Context(t), types.NamespacedName{Name: v1alpha1.EvacuationName(node, provider)}, ev)
	return ev, err
}

// waitProviderGone waits until the deleted provider is released and gone.
func (s *safety) waitProviderGone(t *testing.T, name string) {
	t.Helper()
	p := &v1alpha1.EvacuationProvider{}
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(s.cl.Get(ctx, types.NamespacedName{Name: name}, p)), nil
	})
	if err != nil {
		t.Errorf("EvacuationProvider %s was never released after its evacuation Completed: finalizers %v", name, p.Finalizers)
	}
}

// TestVolumesProviderDeletedMidEvacuation (issue 11): the Mover's
// EvacuationProvider is deleted while it copies a node's volumes (half of
// them with their only replica there, all in use by pods on the node). The
// pods stay, the drain says why, and the provider object stays (finalizer)
// while its Evacuation is unfinished; the Mover process goes on, and once
// it finishes the pods leave, no replica is lost, and the provider is
// released.
func TestVolumesProviderDeletedMidEvacuation(t *testing.T) {
	s := startSafety(t, "pdel", 4)
	a := s.nodes[0]
	data := s.volumes(t, a, 12)
	want := s.replicaCounts(t, data)
	s.app(t, s.prefix, a, names(data))
	inUse := watchInUse(t, s.env)
	guard := guardPods(t, s.c, s.ns, s.movedFirst)
	evName := v1alpha1.EvacuationName(a, s.moverP)

	s.drain(t, a)
	s.pauseMidway(t, a)
	t.Log("the Mover's EvacuationProvider is deleted mid-evacuation")
	if err := s.cl.Delete(testenv.Context(t), &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: s.moverP}}); err != nil {
		t.Fatal(err)
	}
	s.waitDrain(t, guard, a, "holding the pods of the deleted provider", func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Reason == blockerEvacuation && strings.Contains(b.Detail, "deleted while evacuating") {
				return true
			}
		}
		return false
	})
	s.waitHeartbeats(t, guard, evName, 3)
	s.checkAppStays(t, guard, a, 3, "after the provider's deletion")
	p := &v1alpha1.EvacuationProvider{}
	if err := s.cl.Get(testenv.Context(t), types.NamespacedName{Name: s.moverP}, p); err != nil {
		t.Fatalf("the deleted provider is gone while its evacuation is unfinished: %v", err)
	}
	if p.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(p, finalizerEvacuations) {
		t.Errorf("the deleted provider: deletionTimestamp %v, finalizers %v; want it being deleted and held by %s", p.DeletionTimestamp, p.Finalizers, finalizerEvacuations)
	}

	t.Log("the Mover, still running, finishes")
	s.mover.resume()
	s.waitPhase(t, a, v1alpha1.PhaseDrained)
	s.waitProviderGone(t, s.moverP)
	guard.check(t, 3)
	inUse.check(t)
	s.checkLayout(t, data, want, a)
}

// TestVolumesProviderNarrowedMidEvacuation (issue 11): the Mover's
// podSelector is changed to select nothing while it copies. The pods it
// was asked to protect stay until it finishes; no replica is lost.
func TestVolumesProviderNarrowedMidEvacuation(t *testing.T) {
	s := startSafety(t, "narrow", 4)
	a := s.nodes[0]
	data := s.volumes(t, a, 12)
	want := s.replicaCounts(t, data)
	s.app(t, s.prefix, a, names(data))
	inUse := watchInUse(t, s.env)
	guard := guardPods(t, s.c, s.ns, s.movedFirst)
	evName := v1alpha1.EvacuationName(a, s.moverP)

	s.drain(t, a)
	s.pauseMidway(t, a)
	t.Log("the Mover's podSelector is narrowed to select nothing mid-evacuation")
	ctx := testenv.Context(t)
	p := &v1alpha1.EvacuationProvider{}
	if err := s.cl.Get(ctx, types.NamespacedName{Name: s.moverP}, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "nothing-runs-with-this-label"}}
	if err := s.cl.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	s.waitHeartbeats(t, guard, evName, 3)
	s.waitDrain(t, guard, a, "holding the pods for the Evacuation", func(nd *v1alpha1.NodeDrain) bool {
		held := 0
		for _, b := range nd.Status.Blockers {
			if b.Reason == blockerEvacuation && b.Holder == "Evacuation "+evName {
				held++
			}
		}
		return held == 3
	})
	s.checkAppStays(t, guard, a, 3, "after the provider was narrowed")

	t.Log("the Mover finishes")
	s.mover.resume()
	s.waitPhase(t, a, v1alpha1.PhaseDrained)
	guard.check(t, 3)
	inUse.check(t)
	s.checkLayout(t, data, want, a)
}

// nodeDeletePolicy creates a DrainPolicy with onNodeDelete: Drain for the
// test's pool and waits until its nodes carry vacate's node finalizer.
func (s *safety) nodeDeletePolicy(t *testing.T) {
	t.Helper()
	ctx := testenv.Context(t)
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.prefix}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": s.prefix}},
		Triggers:     v1alpha1.Triggers{OnNodeDelete: "Drain"},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(2))},
	}}
	if err := s.cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.cl.Delete(context.Background(), dp) })
	for _, n := range s.nodes {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			node, err := s.c.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			return err == nil && controllerutil.ContainsFinalizer(node, finalizerNodeDrain), nil
		})
		if err != nil {
			t.Fatalf("node %s never got the finalizer %s", n, finalizerNodeDrain)
		}
	}
}

// maintenance is a person's Maintenance drain of node, as the CLI asks it.
func (s *safety) maintenance(t *testing.T, node string) {
	t.Helper()
	if err := requests.Apply(testenv.Context(t), s.cl, node, v1alpha1.Requester{Name: "cli:x", Reason: "kernel upgrade"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
}

func (s *safety) deleteNode(t *testing.T, node string) {
	t.Helper()
	if err := s.c.Client.CoreV1().Nodes().Delete(testenv.Context(t), node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitNodeGone waits until the deleted node is released and gone.
func (s *safety) waitNodeGone(t *testing.T, node string) {
	t.Helper()
	ctx := testenv.Context(t)
	testutil.Eventually(t, 2*time.Minute, "deleted node "+node+" to be released", func() error {
		_, err := s.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		nd := &v1alpha1.NodeDrain{}
		_ = s.cl.Get(ctx, types.NamespacedName{Name: node}, nd)
		return fmt.Errorf("drain mode %s, phase %s, hooks %+v, blockers %+v", nd.Spec.Mode, nd.Status.Phase, nd.Status.Hooks, nd.Status.Blockers)
	})
}

// checkDrainedForDeletion: the drain of a deleted node ran to Drained in
// Decommission, still at the person's request and the deletion's.
func (s *safety) checkDrainedForDeletion(t *testing.T, node string) {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := s.cl.Get(testenv.Context(t), types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	if nd.Spec.Mode != v1alpha1.ModeDecommission || nd.Status.Mode != v1alpha1.ModeDecommission || nd.Status.Phase != v1alpha1.PhaseDrained {
		t.Errorf("the drain of deleted node %s: spec.mode %s, status.mode %s, phase %s; want Drained in Decommission",
			node, nd.Spec.Mode, nd.Status.Mode, nd.Status.Phase)
	}
	if requests.Index(nd, "cli:x") < 0 {
		t.Errorf("the drain of %s lost the person's request: %+v", node, nd.Spec.Requesters)
	}
}

// TestVolumesNodeDeletionRaisesToDecommission (issue 11), under a policy
// with onNodeDelete: Drain, on two nodes with a person's Maintenance drain
// (requester cli:x):
//   - one holds only volumes nobody on it uses (some with their only
//     replica there): its Maintenance drain asks no provider and is Drained
//     with the data in place; deleting the node raises the drain to
//     Decommission, which moves every volume off before the node goes;
//   - the other holds volumes its pods use: it is deleted while the Mover
//     copies them for the Maintenance drain; the drain is raised to
//     Decommission, the pods stay until the copies are done, and then the
//     node goes.
//
// No replica is lost; no pod leaves before its volumes have a copy
// elsewhere; no replica in use is deleted.
func TestVolumesNodeDeletionRaisesToDecommission(t *testing.T) {
	s := startSafety(t, "ndel", 4)
	s.nodeDeletePolicy(t)
	hot, cold := s.nodes[0], s.nodes[1]
	data := s.volumes(t, cold, 6)
	hotData := s.volumes(t, hot, 8)
	for name, b := range hotData {
		data[name] = b
	}
	want := s.replicaCounts(t, data)
	before, err := s.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	s.app(t, s.prefix, hot, names(hotData))
	inUse := watchInUse(t, s.env)
	guard := guardPods(t, s.c, s.ns, s.movedFirst)

	t.Log("a Maintenance drain of the node with cold volumes only: Drained, data in place")
	s.maintenance(t, cold)
	s.waitDrain(t, guard, cold, "Drained", func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	for _, p := range []string{s.moverP, s.cleanerP} {
		if ev, err := s.evacuation(t, cold, p); err == nil {
			t.Errorf("a Maintenance drain with no protected pod on %s asked provider %s: %+v", cold, p, ev.Spec)
		}
	}
	s.checkUnchanged(t, before, "after the Maintenance drain of "+cold)

	t.Log("the node is deleted: the drain is raised to Decommission and moves every volume before the node goes")
	s.deleteNode(t, cold)
	s.waitNodeGone(t, cold)
	s.checkDrainedForDeletion(t, cold)
	s.checkLayout(t, data, want, cold)

	t.Log("a Maintenance drain of the node whose pods use its volumes; the node is deleted mid-evacuation")
	s.maintenance(t, hot)
	s.pauseMidway(t, hot)
	s.deleteNode(t, hot)
	s.waitDrain(t, guard, hot, "raised to Decommission", func(nd *v1alpha1.NodeDrain) bool {
		return nd.Spec.Mode == v1alpha1.ModeDecommission && requests.Index(nd, "cli:x") >= 0
	})
	s.heldForDecommission(t, guard, hot)
	s.finishDecommission(t, guard, inUse, hot)
	s.checkLayout(t, data, want, hot)
	s.checkLayout(t, data, want, cold)
}

// heldForDecommission: the deleted node's Mover evacuation is asked for
// Decommission and goes on (heartbeats) while the app's two pods stay and
// the node is held.
func (s *safety) heldForDecommission(t *testing.T, guard *podGuard, node string) {
	t.Helper()
	evName := v1alpha1.EvacuationName(node, s.moverP)
	err := wait.PollUntilContextTimeout(testenv.Context(t), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ev, err := s.evacuation(t, node, s.moverP)
		return err == nil && ev.Spec.Mode == v1alpha1.ModeDecommission && ev.Status.ObservedGeneration == ev.Generation, nil
	})
	guard.failIfLeft(t, "after the node's deletion")
	if err != nil {
		t.Fatalf("Evacuation %s was never asked for Decommission", evName)
	}
	s.waitHeartbeats(t, guard, evName, 2)
	s.checkAppStays(t, guard, node, 2, "after the node's deletion, mid-evacuation")
	if _, err := s.c.Client.CoreV1().Nodes().Get(testenv.Context(t), node, metav1.GetOptions{}); err != nil {
		t.Fatalf("node %s was released mid-evacuation: %v", node, err)
	}
}

// finishDecommission lets the Mover finish: the app's two pods leave, the
// node goes, its drain Drained in Decommission; no replica in use was
// deleted.
func (s *safety) finishDecommission(t *testing.T, guard *podGuard, inUse *inUseWatch, node string) {
	t.Helper()
	t.Log("the Mover finishes: the pods leave, the node goes")
	s.mover.resume()
	s.waitNodeGone(t, node)
	s.checkDrainedForDeletion(t, node)
	guard.check(t, 2)
	inUse.check(t)
}

// TestVolumesCancelAfterDecommission (issue 11): a Decommission drain whose
// evacuations Completed (the node Drained) is cancelled by its last
// requester while the node stays. Neither provider is asked to cancel: the
// moved replicas stay where they were moved, none is lost.
func TestVolumesCancelAfterDecommission(t *testing.T) {
	s := startSafety(t, "dcancel", 3)
	a := s.nodes[0]
	data := s.volumes(t, a, 8)
	want := s.replicaCounts(t, data)
	s.app(t, s.prefix, a, names(data))
	inUse := watchInUse(t, s.env)
	guard := guardPods(t, s.c, s.ns, s.movedFirst)
	ctx := testenv.Context(t)

	if err := requests.Apply(ctx, s.cl, a, v1alpha1.Requester{Name: "cli:x", Reason: "retire"}, v1alpha1.ModeDecommission, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: a}})
	})
	nd := s.waitDrain(t, nil, a, "Drained", func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	for _, h := range nd.Status.Hooks {
		if h.Phase != string(v1alpha1.EvacuationCompleted) {
			t.Errorf("evacuation %s is %s after Drained, want Completed", h.Name, h.Phase)
		}
	}
	if len(nd.Status.Hooks) != 2 {
		t.Errorf("status.hooks %+v, want the two providers' evacuations", nd.Status.Hooks)
	}
	s.checkLayout(t, data, want, a)
	guard.check(t, 2)
	inUse.check(t)
	// The app's pods are pinned to the node by name; they would come back
	// to it once uncordoned, where their volumes no longer are.
	s.removeApp(t)
	moved, err := s.store.Load()
	if err != nil {
		t.Fatal(err)
	}

	t.Log("the person withdraws; the node stays")
	after, err := requests.Withdraw(ctx, s.cl, nd.DeepCopy(), "cli:x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := requests.DeleteIfIdle(ctx, s.cl, after); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(s.cl.Get(ctx, types.NamespacedName{Name: a}, &v1alpha1.NodeDrain{})), nil
	})
	if err != nil {
		t.Fatal("the cancelled drain was never undone")
	}
	for name, g := range map[string]*gate{s.moverP: s.mover, s.cleanerP: s.cleaner} {
		if calls := g.cancelCalls(); len(calls) > 0 {
			t.Errorf("provider %s was asked to cancel %d time(s) (for %v) after its Decommission evacuation Completed", name, len(calls), calls)
		}
	}
	s.checkUnchanged(t, moved, "after the cancel of a Completed Decommission evacuation (moved data stays moved)")
	s.checkLayout(t, data, want, a)
	if l, err := s.store.Load(); err == nil && slices.Contains(l.Ineligible, a) {
		// Nobody tells the store the node is back: only the Mover's
		// Cancel made a node eligible again.
		t.Logf("the store still keeps %s ineligible for new replicas", a)
	}
	node, err := s.c.Client.CoreV1().Nodes().Get(ctx, a, metav1.GetOptions{})
	if err != nil || node.Spec.Unschedulable {
		t.Errorf("node %s after the cancel: %v, unschedulable %v; want it back in service", a, err, node != nil && node.Spec.Unschedulable)
	}
}

// removeApp deletes the app's Deployments and waits until their pods are
// gone.
func (s *safety) removeApp(t *testing.T) {
	t.Helper()
	ctx := testenv.Context(t)
	err := s.c.Client.AppsV1().Deployments(s.ns).DeleteCollection(ctx,
		metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := s.c.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatal("the app's pods were never gone")
	}
}

// checkUnchanged: every volume has its replicas where it had them in was,
// each with its data.
func (s *safety) checkUnchanged(t *testing.T, was *rv.Layout, when string) {
	t.Helper()
	now, err := s.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range was.Volumes {
		before, after := slices.Sorted(slices.Values(v.Replicas)), slices.Sorted(slices.Values(now.Volumes[name].Replicas))
		if !slices.Equal(before, after) {
			t.Errorf("%s: volume %s has replicas on %v, had %v", when, name, after, before)
		}
		for _, n := range after {
			if !s.store.Verify(now, n, name) {
				t.Errorf("%s: the replica of %s on %s lost its data", when, name, n)
			}
		}
	}
}
