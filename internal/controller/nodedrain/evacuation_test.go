package nodedrain_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// slowStore is a provider whose evacuation of a node takes steps and
// finishes only once released; it records what it was asked.
type slowStore struct {
	release   atomic.Bool
	steps     atomic.Int64
	cancelled atomic.Int64
}

func (s *slowStore) Evacuate(_ context.Context, node string, _ v1alpha1.DrainMode) (evacuation.Progress, error) {
	n := s.steps.Add(1)
	if !s.release.Load() {
		return evacuation.Progress{Remaining: 100 - min(n, 99), Message: "copying replicas off " + node}, nil
	}
	return evacuation.Progress{Done: true, Message: "every replica has a copy elsewhere"}, nil
}

func (s *slowStore) Cancel(_ context.Context, node string) (evacuation.Progress, error) {
	s.cancelled.Add(1)
	return evacuation.Progress{Done: true, Message: "extra replicas removed; " + node + " eligible again"}, nil
}

// runProvider runs a provider in its own manager until stop is called.
func runProvider(t *testing.T, c *devcluster.Cluster, name string, p evacuation.Provider) (stop func()) {
	t.Helper()
	return testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		r := &evacuation.Runner{Client: mgr.GetClient(), Name: name, Provider: p, Heartbeat: 300 * time.Millisecond}
		return r.SetupWithManager(mgr)
	})
}

// guardProtected fails the test if a pod of app starts terminating while
// the node's Evacuation for provider is not Completed (safety invariant 3).
func guardProtected(t *testing.T, e *env, ns, app, node, provider string) (check func()) {
	t.Helper()
	check1 := watchLeaving(t, e, ns, app, node, func(p *corev1.Pod) string {
		evac := &v1alpha1.Evacuation{}
		err := e.cl.Get(context.Background(), types.NamespacedName{Name: v1alpha1.EvacuationName(node, provider)}, evac)
		if err != nil || evac.Status.Phase != v1alpha1.EvacuationCompleted {
			return fmt.Sprintf("pod %s evicted while its evacuation is %q (%v)", p.Name, evac.Status.Phase, err)
		}
		return ""
	})
	return func() { check1(true) }
}

// TestEvacuationBeforeEviction: a provider protects the store's pod. The
// drain creates its Evacuation, evicts the other pods, holds the store's pod
// while the provider works (and while it is silent past its timeout, saying
// it is stale), evicts it once the evacuation is Completed, and on cancel
// asks the provider to undo and waits for it before giving the node back.
func TestEvacuationBeforeEviction(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	pool := map[string]string{"pool": "evac"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "evac", Count: 2, Labels: pool})
	ns := testenv.Namespace(t, e.c)
	target := nodes[0]
	for _, app := range []string{"store", "web"} {
		d := devcluster.Deployment(ns, app, 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: target}
		if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.Everything(), 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	create(t, e, &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "store"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "store"}},
		Timeout:     &metav1.Duration{Duration: 3 * time.Second},
	}})
	store := &slowStore{}
	stop := runProvider(t, e.c, "store", store)
	check := guardProtected(t, e, ns, "store", target, "store")

	requestAll(t, e, []string{target})
	evName := v1alpha1.EvacuationName(target, "store")
	holds := func(detail string) func(*v1alpha1.NodeDrain) bool {
		return func(nd *v1alpha1.NodeDrain) bool {
			for _, b := range nd.Status.Blockers {
				if b.Reason == v1alpha1.BlockerEvacuation && strings.HasPrefix(b.Pod, ns+"/store-") &&
					b.Holder == "Evacuation "+evName && strings.Contains(b.Detail, detail) {
					return true
				}
			}
			return false
		}
	}
	nd := e.waitDrain(t, target, "holding the store's pod for its evacuation", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseEvacuating && holds("InProgress: copying replicas off "+target)(nd) &&
			len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationInProgress)
	})
	t.Logf("while evacuating: %s", testenv.DescribeDrain(nd))
	// The unprotected pod goes meanwhile.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, p := range testenv.PodsOnNode(t, e.c, target) {
			if p.Labels[devcluster.AppLabel] == "web" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("the web pod, which no evacuation protects, was not evicted while the store evacuated")
	}

	t.Log("the provider stops: after its timeout the drain says it is stale, and the pod stays")
	stop()
	e.waitDrain(t, target, "reporting the provider stale", time.Minute, holds("provider store is stale: no heartbeat for"))

	t.Log("the provider comes back and finishes: the store's pod is evicted and the node Drained")
	store.release.Store(true)
	runProvider(t, e.c, "store", store)
	e.waitDrain(t, target, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	check()

	t.Log("cancel: the provider undoes, then the node is given back")
	if err := e.cl.Delete(ctx, &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.cl.Get(ctx, types.NamespacedName{Name: target}, &v1alpha1.NodeDrain{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal("the NodeDrain was not released after cancel")
	}
	if store.cancelled.Load() == 0 {
		t.Error("the provider was never asked to cancel")
	}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: evName}, &v1alpha1.Evacuation{}); !apierrors.IsNotFound(err) {
		t.Errorf("Evacuation %s still there after the undo (%v)", evName, err)
	}
	if n, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s not given back after the undo (%v)", target, err)
	}
}
