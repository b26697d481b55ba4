package nodedrain_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/serving"
)

// Issue 23, item 6: smaller holes.

// TestForegroundDeletionCancelsEvacuations: a NodeDrain deleted with
// foreground cascading (kubectl delete --cascade=foreground) still asks
// its providers to cancel before its Evacuations go: vacate's finalizer
// holds each Evacuation the garbage collector deletes until its provider
// confirmed the cancel.
func TestForegroundDeletionCancelsEvacuations(t *testing.T) {
	e, _, nodes := evacScene(t, "fgdel", 1, map[string]int{"fgstore": 0})
	target := nodes[0]
	create(t, e, provider("fg-store", v1alpha1.StageBeforeEviction, time.Minute, "fgstore"))
	store := &slowStore{}
	runProvider(t, e.c, "fg-store", store)
	requestAll(t, e, []string{target})
	evName := v1alpha1.EvacuationName(target, "fg-store")
	e.waitDrain(t, target, "evacuating", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return len(nd.Status.Hooks) == 1 && nd.Status.Hooks[0].Phase == string(v1alpha1.EvacuationInProgress)
	})

	t.Log("the drain is deleted with foreground cascading while its provider works")
	err := e.cl.Delete(testenv.Context(t), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}},
		client.PropagationPolicy(metav1.DeletePropagationForeground))
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(testenv.Context(t), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := getEvacuation(t, e, evName)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Evacuation %s was not undone and deleted", evName)
	}
	if store.cancelled.Load() == 0 {
		t.Fatal("Evacuation fg-store went without its provider being asked to cancel")
	}
	waitGone(t, e, target)
	if n, err := e.c.Client.CoreV1().Nodes().Get(testenv.Context(t), target, metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("node %s not given back after the undo (%v)", target, err)
	}
}

// TestEvacuationNamesDoNotCollide: node N with provider P.Q and node N.P
// with provider Q would share the name N.P.Q under "<node>.<provider>":
// both drains get an Evacuation of their own, and both end Drained.
func TestEvacuationNamesDoNotCollide(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	short := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "evname", Count: 1, Labels: map[string]string{"pool": "evname"}})[0]
	long := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: short + ".p", Count: 1, Labels: map[string]string{"pool": "evname"}})[0]
	poolPolicy(t, e, "evname", nil)
	ns := testenv.Namespace(t, e.c)
	// Provider "p-0.q" guards the short node's app, "q" the long node's:
	// short + ".p-0.q" == long + ".q".
	apps := map[string]string{short: "evname-short", long: "evname-long"}
	provs := map[string]string{short: "p-0.q", long: "q"}
	if short+"."+provs[short] != long+"."+provs[long] {
		t.Fatalf("the scene does not collide: %s.%s, %s.%s", short, provs[short], long, provs[long])
	}
	for node, app := range apps {
		d := devcluster.Deployment(ns, app, 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
		if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		create(t, e, provider(provs[node], v1alpha1.StageBeforeEviction, time.Minute, app))
		s := &slowStore{}
		s.release.Store(true)
		runProvider(t, e.c, provs[node], s)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.Everything(), 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	requestAll(t, e, []string{short, long})
	for node, prov := range provs {
		e.waitDrain(t, node, "Drained once "+prov+" evacuated", time.Minute, phaseIs(v1alpha1.PhaseDrained))
		ev, err := getEvacuation(t, e, v1alpha1.EvacuationName(node, prov))
		if err != nil || ev.Spec.NodeName != node || ev.Spec.Provider != prov {
			t.Errorf("Evacuation of node %s for %s: %v %+v", node, prov, err, ev.Spec)
		}
	}
}

// TestHeldGatedPodBackInService: an endpoint-aware pod that the drain took
// out of service (it waits out a long settle time) and that then becomes
// held (a provider that protects it registers) goes back in service: a
// hold has no bound, and the pod must not stay NotReady for it.
func TestHeldGatedPodBackInService(t *testing.T) {
	e := startEnv(t)
	sel := map[string]string{testLabel: "gated-held"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "gheld", Count: 2, Labels: sel})
	ns := testenv.Namespace(t, e.c)
	gatedWeb(t, e, ns, sel, 2)
	target := nodes[0]
	drainUnder(t, e, target, "gated-held", v1alpha1.Endpoints{SettleTime: &metav1.Duration{Duration: 10 * time.Minute},
		Timeout: &metav1.Duration{Duration: 30 * time.Minute}})
	var out []string
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out = outOfServiceOn(t, e, ns, target)
		return len(out) == 1, nil
	})
	if err != nil {
		t.Fatalf("no web pod on %s went out of service: %s", target, describeGated(e, ns, target))
	}

	t.Log("a provider that protects the web pods registers: the pod is held, and goes back in service")
	store := provider("gated-store", v1alpha1.StageBeforeEviction, time.Hour, "web")
	// Only this test's web pods: other tests run web pods too.
	store.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	create(t, e, store)
	err = wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, out[0], metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := serving.Get(p)
		return c != nil && c.Status == corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("pod %s stayed out of service while held: %s", out[0], describeGated(e, ns, target))
	}
	nd := e.waitDrain(t, target, "holding the pod for its evacuation", 30*time.Second, func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Pod == ns+"/"+out[0] && b.Reason == v1alpha1.BlockerEvacuation {
				return true
			}
		}
		return false
	})
	t.Logf("held: %s", testenv.DescribeDrain(nd))
	p, err := e.c.Client.CoreV1().Pods(ns).Get(testenv.Context(t), out[0], metav1.GetOptions{})
	if err != nil || !p.DeletionTimestamp.IsZero() {
		t.Errorf("pod %s evicted while held (err %v)", out[0], err)
	}
}
