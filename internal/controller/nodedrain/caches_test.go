package nodedrain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/nodedrain"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// runOwnController runs the NodeDrain controller alone and returns it, so
// the test can look at its memory.
func runOwnController(t *testing.T, c *devcluster.Cluster) *nodedrain.Reconciler {
	t.Helper()
	return runSolo(t, c, solo{queue: eviction.Options{BaseDelay: 200 * time.Millisecond, MaxDelay: time.Second}})
}

// waitRemembered polls the controller's per-pod memory of the node until
// cond holds.
func waitRemembered(t *testing.T, r *nodedrain.Reconciler, node, what string, cond func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond(r.RememberedPods(node)) {
		if time.Now().After(deadline) {
			t.Fatalf("the controller remembers %d pod(s) of node %s, want %s", r.RememberedPods(node), node, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPerPodMemoryIsDroppedWhenTheDrainStops: pods whose evictions the API
// server refuses are remembered (refusals, queue); whichever way the drain stops
// (it ends, times out, is held or is cancelled) the controller forgets
// them.
func TestPerPodMemoryIsDroppedWhenTheDrainStops(t *testing.T) {
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.DrainClient(t, c)}
	r := runOwnController(t, c)
	for _, how := range []string{"ends", "times out", "is held", "is cancelled"} {
		t.Run(how, func(t *testing.T) {
			ctx := testenv.Context(t)
			prefix := fmt.Sprintf("memory-%d", len(how))
			sel := map[string]string{testLabel: prefix}
			node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: prefix, Count: 1, Labels: sel})[0]
			ns := testenv.Namespace(t, c)
			dep := devcluster.Deployment(ns, "api", 2)
			dep.Spec.Template.Spec.NodeSelector = sel
			if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "api"}), 2, 2*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			allow := denyEvictions(t, e, prefix, ns, "api-", pods[0].Name, metav1.StatusReasonForbidden)
			policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}}
			if how == "times out" {
				policy.Spec.Timeouts.Drain = &metav1.Duration{Duration: 10 * time.Second}
			}
			if err := e.cl.Create(ctx, policy); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.cl.Delete(context.Background(), policy) })
			nd := testutil.NodeDrain(node, policy.Name, "cli:test")
			if err := e.cl.Create(ctx, nd); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })

			t.Log("an admission policy refuses both pods' evictions")
			waitRemembered(t, r, node, "both pods refused", func(n int) bool { return n >= 2 })

			switch how {
			case "ends":
				allow()
				e.waitDrain(t, node, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
			case "times out":
				e.waitDrain(t, node, "Failed", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseFailed })
			case "is held":
				if err := e.cl.Delete(ctx, policy); err != nil {
					t.Fatal(err)
				}
				e.waitDrain(t, node, "held: PolicyNotFound", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
					c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionAdmitted)
					return c != nil && c.Reason == v1alpha1.ReasonPolicyNotFound
				})
			case "is cancelled":
				if err := e.cl.Delete(ctx, nd); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(time.Minute)
				for {
					err := e.cl.Get(ctx, types.NamespacedName{Name: node}, &v1alpha1.NodeDrain{})
					if apierrors.IsNotFound(err) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("NodeDrain %s still there a minute after its deletion: %v", node, err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			waitRemembered(t, r, node, "none once the drain "+how, func(n int) bool { return n == 0 })
		})
	}
}
