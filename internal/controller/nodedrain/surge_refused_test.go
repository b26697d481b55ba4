package nodedrain_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/operator"
)

// TestSurgeCreateRefusedBlocksOnlyItsPod: a ResourceQuota leaves no room
// for web's replacement. The refusal is that pod's blocker (SurgeFailed,
// with the API server's message, which 'vacate explain' explains), and the
// node's other pods, which come after it, are evicted all the same. Once
// they left there is room, and vacate tries again (30 s later on the
// controller's clock): the replacement comes up, the pod leaves, the drain
// ends.
func TestSurgeCreateRefusedBlocksOnlyItsPod(t *testing.T) {
	clk := testutil.NewShiftedClock(0)
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.Controller(t, c, func(o *operator.Options) { o.Controllers.Clock = clk })}
	ctx := testenv.Context(t)
	f := newSurgeFixture(t, e, "surge-refused", func(p *v1alpha1.DrainPolicySpec) { p.Pods.Unmanaged = "Delete" }, nil)
	// The quota first, counting web's pod: the two bare pods are then
	// counted as they are created (quota admission). A quota created after
	// them may miss one until the quota controller's next full sync,
	// minutes later (CI saw used=2).
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}}}
	if _, err := c.Client.CoreV1().ResourceQuotas(f.ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	quotaCounts := func(n int64) {
		t.Helper()
		testutil.Eventually(t, time.Minute, fmt.Sprintf("the quota counting %d pod(s)", n), func() error {
			q, err := c.Client.CoreV1().ResourceQuotas(f.ns).Get(ctx, "pods", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if used, ok := q.Status.Used[corev1.ResourcePods]; !ok || used.Value() != n {
				return fmt.Errorf("used %v", q.Status.Used)
			}
			return nil
		})
	}
	quotaCounts(1)
	for _, name := range []string{"zz-bare-1", "zz-bare-2"} {
		if _, err := c.Client.CoreV1().Pods(f.ns).Create(ctx, devcluster.BarePod(f.ns, name, f.node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	quotaCounts(3)

	requestAll(t, e, []string{f.node})
	nd := e.waitDrain(t, f.node, "web blocked by SurgeFailed, the other pods evicted", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b, ok := blockerOf(nd, f.ns, f.pod.Name)
		return ok && b.Reason == v1alpha1.BlockerSurgeFailed && nd.Status.Remaining == 1 && nd.Status.Evicted == 2
	})
	b, _ := blockerOf(nd, f.ns, f.pod.Name)
	t.Logf("blocker: %s: %s", b.Reason, b.Detail)
	if !strings.Contains(b.Detail, "exceeded quota: pods") {
		t.Errorf("the blocker does not carry the API server's message: %q", b.Detail)
	}
	if len(nd.Status.Surges) != 1 || nd.Status.Surges[0].Phase != v1alpha1.SurgeFailed || nd.Status.Surges[0].Replacement != "" {
		t.Errorf("status.surges = %+v, want one Failed, with no replacement", nd.Status.Surges)
	}
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, []string{"explain", f.node, "--kubeconfig", c.Kubeconfig}, cli.Streams{In: io.MultiReader(), Out: &out, Err: &errOut}, clock.RealClock{})
	t.Logf("$ vacate explain %s → %d\n%s%s", f.node, code, out.String(), errOut.String())
	for _, want := range []string{"exceeded quota: pods", "could not create", "ResourceQuota", "vacate-controller-surge"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("vacate explain does not say %q", want)
		}
	}

	// The other pods left: there is room now. The next attempt comes
	// after 30 s.
	clk.Shift(31 * time.Second)
	e.waitDrain(t, f.node, "a replacement starting", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return len(nd.Status.Surges) == 1 && nd.Status.Surges[0].Phase == v1alpha1.SurgeStarting && nd.Status.Surges[0].Replacement != ""
	})
	for _, rep := range replacements(t, e, f.ns) {
		setGate(t, e, &rep)
	}
	e.waitDrain(t, f.node, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
}
