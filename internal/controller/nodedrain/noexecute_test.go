package nodedrain_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/explain"
)

// TestNoExecuteTriggerTaintWarns: the trigger taint vacate.dev/drain with
// effect NoExecute still requests the drain, but Kubernetes' taint manager
// deletes the node's untolerating pods at once, past PDBs and evacuations.
// vacate says so: the condition NoExecuteTaint is True while the taint is
// there, a Warning event goes on the node, and `vacate explain` has a line
// for it. Once the taint is NoSchedule the condition turns False; vacate
// never sets NoExecute itself. (Which pods the taint manager deleted is not
// checked: that is Kubernetes' doing.)
func TestNoExecuteTriggerTaintWarns(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "noexec", Count: 1, Labels: map[string]string{"pool": "noexec"}})
	node := nodes[0]
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "noexec"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "noexec"}},
	}})
	t.Cleanup(func() {
		_ = e.cl.Delete(ctx, &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	ns := testenv.Namespace(t, e.c)
	annotatedApp(t, e, ns, "web", node, nil)

	updateNode(t, e, node, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: v1alpha1.TaintDrain, Effect: corev1.TaintEffectNoExecute})
	})
	nd := e.waitDrain(t, node, "requested by the taint and warning about NoExecute", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionNoExecuteTaint)
		return len(nd.Spec.Requesters) > 0 && nd.Spec.Requesters[0].Name == v1alpha1.RequesterTaint &&
			c != nil && c.Status == metav1.ConditionTrue
	})
	c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionNoExecuteTaint)
	t.Logf("condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	if c.Reason != v1alpha1.ReasonNoExecuteTaint || !strings.Contains(c.Message, "NoSchedule") || !strings.Contains(c.Message, "PodDisruptionBudget") {
		t.Errorf("condition %s: %s %q; want reason %s and a message saying PDBs are bypassed and to use NoSchedule",
			c.Type, c.Reason, c.Message, v1alpha1.ReasonNoExecuteTaint)
	}
	waitNodeEvent(t, e, node, corev1.EventTypeWarning, v1alpha1.EventNoExecuteTaint, "NoSchedule")
	found := false
	for _, f := range explain.Explain(explain.Input{Drain: nd, Now: time.Now()}).Findings {
		if strings.Contains(f.Cause, "NoExecute") && strings.Contains(f.Fix, "NoSchedule") {
			found = true
			t.Logf("explain: %s: %s -> %s", f.Subject, f.Cause, f.Fix)
		}
	}
	if !found {
		t.Errorf("vacate explain has no line about the NoExecute taint")
	}

	t.Log("the taint becomes NoSchedule: the drain stays requested, the warning ends")
	updateNode(t, e, node, func(n *corev1.Node) {
		for i := range n.Spec.Taints {
			if n.Spec.Taints[i].Key == v1alpha1.TaintDrain {
				n.Spec.Taints[i].Effect = corev1.TaintEffectNoSchedule
			}
		}
	})
	e.waitDrain(t, node, "NoExecuteTaint False", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionNoExecuteTaint)
		return len(nd.Spec.Requesters) > 0 && c != nil && c.Status == metav1.ConditionFalse
	})
	n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoExecute && strings.HasPrefix(taint.Key, "vacate.dev/") {
			t.Errorf("node %s has taint %s:%s, which vacate never sets", node, taint.Key, taint.Effect)
		}
	}
}
