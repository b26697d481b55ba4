package replicatedvolume_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
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
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	rv "github.com/vacate-dev/vacate/examples/replicated-volume"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// env is a cluster with the vacate controller, nodes in one pool, a volume
// store, and the two providers running against it.
type env struct {
	c     *devcluster.Cluster
	cl    client.Client
	ns    string
	nodes []string
	store *rv.Store
	mover *rv.Mover
}

func start(t *testing.T, prefix string, nodes int, copyDelay time.Duration) *env {
	t.Helper()
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.Controller(t, c), ns: testenv.Namespace(t, c), store: &rv.Store{Root: t.TempDir()}}
	e.nodes = testenv.Nodes(t, c, devcluster.NodeSet{Prefix: prefix, Count: nodes, Labels: map[string]string{"pool": prefix}})
	ctx := testenv.Context(t)
	if err := devcluster.WaitForServiceAccount(ctx, c.Client, e.ns, time.Minute); err != nil {
		t.Fatal(err)
	}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: prefix + "-app"}}
	for name, stage := range map[string]v1alpha1.EvacuationStage{prefix + "-volumes": v1alpha1.StageBeforeEviction, prefix + "-cleanup": v1alpha1.StageAfterEviction} {
		p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.EvacuationProviderSpec{PodSelector: sel, Stage: stage, Timeout: &metav1.Duration{Duration: 10 * time.Second}}}
		if err := e.cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.cl.Delete(context.Background(), p) })
	}
	testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		inUse := rv.PodsInUse(mgr.GetClient())
		e.mover = &rv.Mover{Store: e.store, InUse: inUse, CopyDelay: copyDelay, Budget: 200 * time.Millisecond,
			Nodes: func(context.Context) ([]string, error) { return e.nodes, nil }}
		for name, p := range map[string]evacuation.Provider{prefix + "-volumes": e.mover, prefix + "-cleanup": &rv.Cleaner{Store: e.store, InUse: inUse}} {
			r := &evacuation.Runner{Client: mgr.GetClient(), Name: name, Provider: p, Heartbeat: 200 * time.Millisecond}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
		}
		return nil
	})
	return e
}

// volumes creates n volumes with a replica on node, every other one with a
// second replica on one of the others, and returns their data by name.
func (e *env) volumes(t *testing.T, node string, n int) map[string][]byte {
	t.Helper()
	others := slices.DeleteFunc(slices.Clone(e.nodes), func(x string) bool { return x == node })
	data := map[string][]byte{}
	for i := range n {
		name := fmt.Sprintf("%s-v%02d", node, i)
		b := make([]byte, 32<<10)
		_, _ = rand.Read(b)
		on := []string{node}
		if i%2 == 1 {
			on = append(on, others[i%len(others)])
		}
		if err := e.store.Create(name, b, on...); err != nil {
			t.Fatal(err)
		}
		data[name] = b
	}
	return data
}

// app runs pods on node that use the volumes (four per pod).
func (e *env) app(t *testing.T, prefix, node string, vols []string) {
	t.Helper()
	ctx := testenv.Context(t)
	sort.Strings(vols)
	for i := 0; i < len(vols); i += 4 {
		d := devcluster.Deployment(e.ns, fmt.Sprintf("%s-%d", node, i/4), 1)
		d.Spec.Template.Labels[devcluster.AppLabel] = prefix + "-app"
		d.Spec.Selector.MatchLabels[devcluster.AppLabel] = prefix + "-app"
		d.Spec.Selector.MatchLabels["part"] = d.Name
		d.Spec.Template.Labels["part"] = d.Name
		d.Spec.Template.Annotations = map[string]string{rv.AnnotationVolumes: strings.Join(vols[i:min(i+4, len(vols))], ",")}
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
		if _, err := e.c.Client.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		n := 0
		for _, p := range testenv.PodsOnNode(t, e.c, node) {
			if p.Annotations[rv.AnnotationVolumes] != "" && devcluster.PodReady(&p) {
				n++
			}
		}
		return n == (len(vols)+3)/4, nil
	})
	if err != nil {
		t.Fatal("the app's pods did not start")
	}
}

func (e *env) drain(t *testing.T, node string) {
	t.Helper()
	if err := requests.Apply(testenv.Context(t), e.cl, node, v1alpha1.Requester{Name: "cli:test"}, "", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
}

func (e *env) waitPhase(t *testing.T, node string, phase v1alpha1.DrainPhase) {
	t.Helper()
	ctx := context.Background()
	nd := &v1alpha1.NodeDrain{}
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("drain of %s %s", node, phase), func() error {
		if e.cl.Get(ctx, types.NamespacedName{Name: node}, nd) == nil && nd.Status.Phase == phase {
			return nil
		}
		return fmt.Errorf("phase %s, hooks %+v, blockers %+v", nd.Status.Phase, nd.Status.Hooks, nd.Status.Blockers)
	})
}

// inUseWatch checks, every 20 ms, that no replica a pod uses disappears.
type inUseWatch struct {
	mu         sync.Mutex
	checks     int
	violations []string
	stop       func()
}

func watchInUse(t *testing.T, e *env) *inUseWatch {
	t.Helper()
	w := &inUseWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := e.c.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				w.mu.Lock()
				for _, p := range pods.Items {
					if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
						continue
					}
					for _, v := range strings.Split(p.Annotations[rv.AnnotationVolumes], ",") {
						if v == "" {
							continue
						}
						w.checks++
						if _, err := os.Stat(e.store.ReplicaPath(p.Spec.NodeName, v)); err != nil && stillUses(ctx, e, &p) {
							w.violations = append(w.violations, fmt.Sprintf("pod %s on %s uses %s, whose replica there is gone", p.Name, p.Spec.NodeName, v))
						}
					}
				}
				w.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(w.stop)
	return w
}

// stillUses: the pod, listed before its replica was found gone, still
// exists and runs now. The list and the look at the replica are not one
// moment: a pod deleted in between (its replica then rightly removed) is no
// violation, but a pod that exists after the replica was gone existed when
// it was gone.
func stillUses(ctx context.Context, e *env, listed *corev1.Pod) bool {
	p, err := e.c.Client.CoreV1().Pods(listed.Namespace).Get(ctx, listed.Name, metav1.GetOptions{})
	if err != nil {
		return !apierrors.IsNotFound(err) && ctx.Err() == nil
	}
	return p.UID == listed.UID && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func (w *inUseWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checks == 0 {
		t.Error("the in-use watch checked nothing")
	}
	for _, v := range w.violations[:min(len(w.violations), 10)] {
		t.Error(v)
	}
}

// checkLayout: every volume has want[name] replicas, none on gone, each with
// the original data; nothing refers to gone.
func (e *env) checkLayout(t *testing.T, data map[string][]byte, want map[string]int, gone string) {
	t.Helper()
	l, err := e.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range data {
		v := l.Volumes[name]
		if len(v.Replicas) != want[name] || slices.Contains(v.Replicas, gone) {
			t.Errorf("volume %s has replicas on %v, want %d and none on %s", name, v.Replicas, want[name], gone)
		}
		for _, n := range v.Replicas {
			got, err := os.ReadFile(e.store.ReplicaPath(n, name))
			if err != nil || rv.Checksum(got) != rv.Checksum(b) {
				t.Errorf("replica of %s on %s differs from the original (%v)", name, n, err)
			}
		}
	}
	if files, _ := os.ReadDir(filepath.Join(e.store.Root, "nodes", gone)); len(files) > 0 {
		t.Errorf("%d file(s) left on %s", len(files), gone)
	}
	for node, moves := range l.Added {
		for _, mv := range moves {
			if node == gone || mv.From == gone || mv.To == gone {
				t.Errorf("the layout still records a move %+v for %s", mv, node)
			}
		}
	}
}

// TestVolumesLeaveTheNodeAndChain is issue 6's volume scenario: 20 volumes
// (half with one replica, half with two) on a node that app pods use. After
// its drain every volume has its replica count on other nodes, with the
// original data, and no replica in use was ever deleted. Then the node
// that received some of them is drained in turn: they move on again and
// nothing refers to it.
func TestVolumesLeaveTheNodeAndChain(t *testing.T) {
	e := start(t, "vol", 5, 0)
	a := e.nodes[0]
	data := e.volumes(t, a, 20)
	want := map[string]int{}
	var names []string
	for name := range data {
		l, _ := e.store.Load()
		want[name] = len(l.Volumes[name].Replicas)
		names = append(names, name)
	}
	e.app(t, "vol", a, names)
	watch := watchInUse(t, e)
	// A PDB holds the app's pods for a while after the copies are done: the
	// cleaner must not delete the replicas they still read meanwhile.
	ctx := testenv.Context(t)
	pdb := devcluster.PDB(e.ns, "vol-app", "vol-app", "", "0")
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(e.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.drain(t, a)
	nd := &v1alpha1.NodeDrain{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if e.cl.Get(ctx, types.NamespacedName{Name: a}, nd) != nil {
			return false, nil
		}
		for _, h := range nd.Status.Hooks {
			if h.Name == v1alpha1.EvacuationName(a, "vol-volumes") && h.Phase == string(v1alpha1.EvacuationCompleted) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the copies never completed: %+v", nd.Status.Hooks)
	}
	time.Sleep(2 * time.Second) // the cleaner runs several times while the pods stay
	if err := e.c.Client.PolicyV1().PodDisruptionBudgets(e.ns).Delete(ctx, pdb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(t, a, v1alpha1.PhaseDrained)
	e.checkLayout(t, data, want, a)

	// Chained: the node that got the most replicas is drained too.
	l, _ := e.store.Load()
	count := map[string]int{}
	for _, v := range l.Volumes {
		for _, n := range v.Replicas {
			count[n]++
		}
	}
	b := ""
	for _, n := range e.nodes[1:] {
		if b == "" || count[n] > count[b] {
			b = n
		}
	}
	t.Logf("chained: %d volumes moved off %s; now draining %s, which holds %d of their replicas", len(data), a, b, count[b])
	var onB []string
	for name, v := range l.Volumes {
		if slices.Contains(v.Replicas, b) {
			onB = append(onB, name)
		}
	}
	e.app(t, "vol", b, onB) // the app now reads them there
	e.drain(t, b)
	e.waitPhase(t, b, v1alpha1.PhaseDrained)
	e.checkLayout(t, data, want, b)
	watch.check(t)
}

// TestUndoMidEvacuation: a drain cancelled while replicas are being copied
// leaves the layout as it was: the added replicas are removed and the node
// is eligible again; a volume whose new replica is in use by then keeps it
// and loses the original instead.
func TestUndoMidEvacuation(t *testing.T) {
	e := start(t, "undo", 4, 300*time.Millisecond)
	a := e.nodes[0]
	data := e.volumes(t, a, 10)
	before, err := e.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range data {
		names = append(names, name)
	}
	sort.Strings(names)
	// The app uses all but the first volume, whose original is therefore
	// free to go when its new replica gets a reader.
	e.app(t, "undo", a, names[1:])
	e.drain(t, a)

	var moved rv.Move
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		l, err := e.store.Load()
		if err != nil {
			return false, nil
		}
		for _, mv := range l.Added[a] {
			if mv.Volume == names[0] {
				moved = mv
				return e.store.Verify(l, moved.To, moved.Volume), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the evacuation never got under way")
	}
	// A pod now reads the new replica of one volume.
	reader := devcluster.BarePod(e.ns, "reader", moved.To)
	reader.Annotations = map[string]string{rv.AnnotationVolumes: moved.Volume}
	if _, err := e.c.Client.CoreV1().Pods(e.ns).Create(testenv.Context(t), reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Client.CoreV1().Pods(e.ns).Get(ctx, "reader", metav1.GetOptions{})
		return err == nil && devcluster.PodReady(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the provider's cache sees the reader
	l, _ := e.store.Load()
	copied := 0
	for _, mv := range l.Added[a] {
		if e.store.Verify(l, mv.To, mv.Volume) {
			copied++
		}
	}
	t.Logf("cancelling with %d of %d volumes copied", copied, len(data))
	if copied == len(data) {
		t.Fatal("every volume was copied before the cancel: not mid-evacuation")
	}
	if err := e.cl.Delete(testenv.Context(t), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: a}}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.cl.Get(ctx, types.NamespacedName{Name: a}, &v1alpha1.NodeDrain{})), nil
	})
	if err != nil {
		t.Fatal("the cancelled drain was not released")
	}
	after, err := e.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range before.Volumes {
		want := slices.Clone(v.Replicas)
		if name == moved.Volume {
			want = append(slices.DeleteFunc(want, func(n string) bool { return n == a }), moved.To)
		}
		got := slices.Clone(after.Volumes[name].Replicas)
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("volume %s: replicas %v after the undo, want %v", name, got, want)
		}
		for _, n := range got {
			if !e.store.Verify(after, n, name) {
				t.Errorf("replica of %s on %s lost its data", name, n)
			}
		}
	}
	if len(after.Added) > 0 || slices.Contains(after.Ineligible, a) {
		t.Errorf("after the undo: added %v, ineligible %v; want none", after.Added, after.Ineligible)
	}
	files, _ := filepath.Glob(filepath.Join(e.store.Root, "nodes", "*", "*"))
	replicas := 0
	for _, v := range after.Volumes {
		replicas += len(v.Replicas)
	}
	if len(files) != replicas {
		t.Errorf("%d replica files for %d replicas: the undo left copies behind", len(files), replicas)
	}
}
