package nodedrain_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/surge"
)

// TestDecoyOnTheNodeDoesNotStallItsDrain: a tenant's bare pod labelled as
// a surge replacement (vacate.dev/surge-of), without the NodeDrain owner
// reference only vacate-controller may write, is drained as the bare pod
// it is (pods.unmanaged: Delete evicts it); it is not waited on for ever as
// a replacement another drain would adopt or remove.
func TestDecoyOnTheNodeDoesNotStallItsDrain(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "decoy-node", Count: 1, Labels: map[string]string{"pool": "decoy-node"}})[0]
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "decoy-node"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "decoy-node"}},
		Pods:         v1alpha1.PodPolicy{Unmanaged: "Delete"},
	}})
	ns := testenv.Namespace(t, e.c)
	p := devcluster.BarePod(ns, "decoy", node)
	p.Labels[surge.LabelOf] = "0c1d2e3f-not-a-pod"
	p.Labels[surge.LabelDrain] = "elsewhere"
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	requestAll(t, e, []string{node})
	testenv.WaitForDrain(t, e.cl, node, "Drained, the decoy evicted as a bare pod", 2*time.Minute,
		func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained }, testenv.DescribeDrain)
}
