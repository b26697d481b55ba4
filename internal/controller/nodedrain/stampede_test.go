package nodedrain_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestNoStampedeOnAPDB: ten pods of one Deployment on a node, behind a PDB
// with maxUnavailable 1, their replacements landing on another node. Each
// freed disruption lets one eviction through; vacate must try about that
// many, not every waiting pod each time. Counted from the API server's
// audit log: the evictions refused with 429 stay within the successful ones
// plus a small constant (a pass that works from a cache a moment behind the
// last eviction may try one pod too many).
func TestNoStampedeOnAPDB(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	sel := map[string]string{testLabel: "stampede"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "stampede", Count: 2, Labels: sel})
	target, spare := nodes[0], nodes[1]
	updateNode(t, e, spare, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	ns := testenv.Namespace(t, e.c)
	const pods = 10
	dep := devcluster.Deployment(ns, "web", pods)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), pods, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "web", pods, time.Minute); err != nil {
		t.Fatal(err)
	}
	updateNode(t, e, spare, func(n *corev1.Node) { n.Spec.Unschedulable = false })
	guard := testenv.WatchPDBs(t, e.c, ns)

	t.Logf("draining %s: %d pods, one disruption at a time", target, pods)
	drainNode(t, e, target)
	done := e.waitDrain(t, target, "Drained", 5*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	guard.Check(t)

	events, err := devcluster.ReadAudit(e.c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	succeeded, refused := 0, 0
	for _, ev := range events {
		if ev.Verb != "create" || ev.ObjectRef == nil || ev.ObjectRef.Subresource != "eviction" || ev.ObjectRef.Namespace != ns {
			continue
		}
		switch {
		case ev.Succeeded():
			succeeded++
		case ev.ResponseStatus != nil && ev.ResponseStatus.Code == 429:
			refused++
		}
	}
	t.Logf("eviction calls: %d succeeded, %d refused by the PDB (429)", succeeded, refused)
	if succeeded != pods {
		t.Errorf("%d successful evictions, want %d", succeeded, pods)
	}
	if refused > succeeded+2 {
		t.Errorf("%d evictions refused for %d successful ones: vacate tries every waiting pod when one disruption frees up", refused, succeeded)
	}
}
