package broker_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/requests"
)

// TestBrokerFailedDrainThenNodeDeleted (issue 23): a person's Maintenance
// drain of a broker's node Fails (timeouts.drain) while the peers refuse
// broker-0's messages. The node is then deleted: the Failed drain is raised
// to Decommission and runs again, the broker is told so, its pod stays
// until every message is on a peer, and only then is the node released. No
// message is lost or duplicated.
func TestBrokerFailedDrainThenNodeDeleted(t *testing.T) {
	e := startBrokers(t, "brkfail", v1alpha1.Triggers{OnNodeDelete: "Drain"}, func(s *v1alpha1.DrainPolicySpec) {
		s.Timeouts.Drain = &metav1.Duration{Duration: 3 * time.Second}
	})
	ctx := testenv.Context(t)
	target := e.nodes[0]
	e.waitNodeFinalizer(t)
	published := e.publishN(t, safetyMessages)
	b0 := e.served[0]
	seen := e.watchBroker0(t)
	for _, s := range e.served[1:] {
		s.refusePeers(true)
	}

	t.Log("a Maintenance drain, while the peers refuse broker-0's messages: it Fails by timeouts.drain")
	if err := requests.Apply(ctx, e.cl, target, v1alpha1.Requester{Name: "cli:x", Reason: "kernel upgrade"}, v1alpha1.ModeMaintenance, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	e.waitDrain(t, seen, "Failed in Maintenance", func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseFailed && nd.Status.Mode == v1alpha1.ModeMaintenance
	})
	held, _ := b0.proc().stats()
	t.Logf("broker-0 still holds %d message(s)", held.Stored)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dp := &v1alpha1.DrainPolicy{}
		if err := e.cl.Get(ctx, types.NamespacedName{Name: "brkfail"}, dp); err != nil {
			return err
		}
		dp.Spec.Timeouts.Drain = &metav1.Duration{Duration: 10 * time.Minute}
		return e.cl.Update(ctx, dp)
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Log("the node is deleted: the Failed drain runs again in Decommission")
	if err := e.c.Client.CoreV1().Nodes().Delete(ctx, target, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		calls := b0.hookCalls()
		return seen.get() != "" || slices.Contains(calls, http.MethodPost+" "+string(v1alpha1.ModeDecommission)), nil
	})
	e.checkBroker0Stays(t, seen, "after the node's deletion")
	if err != nil {
		t.Fatalf("broker-0 was never told the drain is a Decommission: hook calls %s", compact(b0.hookCalls()))
	}
	if _, err := e.c.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{}); err != nil {
		t.Fatalf("node %s was released while broker-0 still held messages: %v", target, err)
	}

	e.finishDecommission(t, seen, published)
}
