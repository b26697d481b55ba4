package operator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
)

// TestStateMetricsOnLeaderOnly: a replica that waits for a Lease someone
// else holds serves vacate_controller_leader 0 and no drain, though a
// drain exists; once it stops, a replica that leads (no election) serves
// vacate_controller_leader 1 and the drain: the state collector follows
// each manager's lifetime, so the second could register its own.
func TestStateMetricsOnLeaderOnly(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cl := testenv.DrainClient(t, c)
	const leaseName = "state-metrics-held"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: leaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if err := cl.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), lease) })
	// A drain of a node that does not exist: it waits, and no controller
	// changes anything for it that the test must undo.
	nd := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "state-metrics-none"},
		Spec: v1alpha1.NodeDrainSpec{NodeName: "state-metrics-none", Requesters: []v1alpha1.Requester{{Name: "cli:test"}}}}
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}

	standby := testutil.FreeAddr(t)
	_, stop := testenv.StartController(t, c, func(o *operator.Options) {
		o.MetricsAddr = standby
		o.LeaderElect, o.LeaderElectionID, o.LeaderElectionNamespace = true, leaseName, "kube-system"
		// Long enough that the standby never takes the Lease during the test.
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = time.Hour, 30*time.Minute, time.Second
	})
	body := waitMetrics(t, standby, "vacate_controller_leader 0")
	if strings.Contains(body, "vacate_drain_phase") {
		t.Errorf("a standby reports drains:\n%s", grep(body, "vacate_"))
	}
	if err := stop(); err != nil {
		t.Fatalf("standby: %v", err)
	}

	leader := testutil.FreeAddr(t)
	_, stop = testenv.StartController(t, c, func(o *operator.Options) { o.MetricsAddr = leader })
	waitMetrics(t, leader, "vacate_controller_leader 1", `vacate_drain_phase{node="state-metrics-none",phase="Pending",policy=""} 1`)
	// The drain has the controller's finalizer now: delete it while the
	// controller runs, which releases it.
	if err := cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return !strings.Contains(scrape(leader), `node="state-metrics-none"`), nil
	})
	if err != nil {
		t.Errorf("the deleted drain is still reported:\n%s", grep(scrape(leader), "vacate_drain"))
	}
	if err := stop(); err != nil {
		t.Fatalf("leader: %v", err)
	}
}

// waitMetrics scrapes addr until its /metrics has every line, and returns
// the last body.
func waitMetrics(t *testing.T, addr string, lines ...string) string {
	t.Helper()
	var body string
	testutil.Eventually(t, time.Minute, fmt.Sprintf("/metrics of %s to show %q", addr, lines), func() error {
		body = scrape(addr)
		for _, l := range lines {
			if !strings.Contains(body, l) {
				return fmt.Errorf("it shows:\n%s", grep(body, "vacate_"))
			}
		}
		return nil
	})
	return body
}

func scrape(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// grep keeps the lines of s that start with prefix.
func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
