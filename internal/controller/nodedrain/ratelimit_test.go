package nodedrain_test

import (
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/operator"
)

// TestEvictionRateIsBounded: a controller with --eviction-qps 2 and
// --eviction-burst 3 drains a node of 12 pods that nothing protects. From
// the API server's audit log, the eviction calls in any stretch of time
// never exceed burst + qps × its length (plus one, for the network's
// jitter between the controller's clock and the API server's). First
// attempts count too: without a bound on them all 12 go at once.
func TestEvictionRateIsBounded(t *testing.T) {
	const qps, burst, pods = 2, 3, 12
	c := testenv.Start(t)
	cl := testenv.Controller(t, c, func(o *operator.Options) {
		o.Controllers.EvictionQPS, o.Controllers.EvictionBurst = qps, burst
	})
	e := &env{c: c, cl: cl}
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: "rate"}
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "rate", Count: 1, Labels: sel})
	ns := testenv.Namespace(t, c)
	dep := devcluster.Deployment(ns, "web", pods)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), pods, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	drainNode(t, e, nodes[0])
	e.waitDrain(t, nodes[0], "Drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })

	events, err := devcluster.ReadAudit(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	for _, ev := range events {
		if ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Subresource == "eviction" && ev.ObjectRef.Namespace == ns {
			at = append(at, ev.Received)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	if len(at) < pods {
		t.Fatalf("%d eviction calls in the audit log, want at least %d", len(at), pods)
	}
	for i := range at {
		for j := i; j < len(at); j++ {
			calls := j - i + 1
			allowed := burst + qps*at[j].Sub(at[i]).Seconds() + 1
			if float64(calls) > allowed {
				t.Fatalf("%d eviction calls within %s (from call %d), want at most burst %d + %d/s (+1): %v",
					calls, at[j].Sub(at[i]), i, burst, qps, at)
			}
		}
	}
	t.Logf("%d eviction calls over %s", len(at), at[len(at)-1].Sub(at[0]))
}
