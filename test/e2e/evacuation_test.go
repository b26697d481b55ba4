package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	rv "github.com/vacate-dev/vacate/examples/replicated-volume"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// TestResumeAfterKillMidEvacuation: the controller is SIGKILLed while a
// provider copies replicas off the node. A new controller takes the same
// Evacuations up (same objects: nothing is started twice), the provider
// finishes what it started (one new replica per volume, no extra copy), and
// the drain completes.
func TestResumeAfterKillMidEvacuation(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "kill-evac", Count: 3, Labels: map[string]string{testLabel: "kill-evac"}})
	ns := testenv.Namespace(t, e.c)
	target := nodes[0]
	store := &rv.Store{Root: t.TempDir()}
	const volumes = 8
	var names []string
	for i := range volumes {
		name := fmt.Sprintf("kv%02d", i)
		if err := store.Create(name, []byte(strings.Repeat(name, 1000)), target); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	d := devcluster.Deployment(ns, "app", 1)
	d.Spec.Template.Annotations = map[string]string{rv.AnnotationVolumes: strings.Join(names, ",")}
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: target}
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "app"}), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "app"}}
	for name, stage := range map[string]v1alpha1.EvacuationStage{"kill-volumes": v1alpha1.StageBeforeEviction, "kill-cleanup": v1alpha1.StageAfterEviction} {
		p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.EvacuationProviderSpec{PodSelector: sel, Stage: stage}}
		if err := e.cl.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.cl.Delete(context.Background(), p) })
	}
	testenv.RunManager(t, e.c, func(mgr ctrl.Manager) error {
		inUse := rv.PodsInUse(mgr.GetClient())
		mover := &rv.Mover{Store: store, InUse: inUse, CopyDelay: 500 * time.Millisecond, Budget: 100 * time.Millisecond,
			Nodes: func(context.Context) ([]string, error) { return nodes, nil }}
		for name, p := range map[string]evacuation.Provider{"kill-volumes": mover, "kill-cleanup": &rv.Cleaner{Store: store, InUse: inUse}} {
			r := &evacuation.Runner{Client: mgr.GetClient(), Name: name, Provider: p, Heartbeat: 200 * time.Millisecond}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
		}
		return nil
	})

	first := startController(t, e.c, "first", false, "kill-evac")
	e.drain(t, target)
	e.waitDrain(t, target, "evacuating, part way", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		l, err := store.Load()
		if err != nil || nd.Status.Phase != v1alpha1.PhaseEvacuating {
			return false
		}
		copied := 0
		for _, mv := range l.Added[target] {
			if store.Verify(l, mv.To, mv.Volume) {
				copied++
			}
		}
		return copied >= 2 && copied < volumes
	})
	uids := map[string]types.UID{}
	for _, p := range []string{"kill-volumes", "kill-cleanup"} {
		ev := &v1alpha1.Evacuation{}
		if err := e.cl.Get(ctx, types.NamespacedName{Name: v1alpha1.EvacuationName(target, p)}, ev); err != nil {
			t.Fatal(err)
		}
		uids[p] = ev.UID
	}
	t.Log("killing the controller (SIGKILL) mid-evacuation")
	first.kill()
	startController(t, e.c, "second", false, "kill-evac")
	e.waitDrain(t, target, "Drained", 2*time.Minute, drained)

	for p, uid := range uids {
		ev := &v1alpha1.Evacuation{}
		if err := e.cl.Get(ctx, types.NamespacedName{Name: v1alpha1.EvacuationName(target, p)}, ev); err != nil || ev.UID != uid || ev.Generation != 1 {
			t.Errorf("Evacuation for %s was replaced or re-requested after the restart (uid %s -> %s, generation %d, %v)", p, uid, ev.UID, ev.Generation, err)
		}
	}
	l, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(store.Root, "nodes", "*", "*"))
	for _, name := range names {
		v := l.Volumes[name]
		if len(v.Replicas) != 1 || v.Replicas[0] == target || !store.Verify(l, v.Replicas[0], name) {
			t.Errorf("volume %s: replicas %v, want one good replica off %s", name, v.Replicas, target)
		}
	}
	if len(files) != volumes {
		t.Errorf("%d replica files for %d single-replica volumes: data was copied twice", len(files), volumes)
	}
	if _, err := os.Stat(filepath.Join(store.Root, "nodes", target)); err == nil {
		if left, _ := os.ReadDir(filepath.Join(store.Root, "nodes", target)); len(left) > 0 {
			t.Errorf("%d replica(s) left on %s", len(left), target)
		}
	}
}
