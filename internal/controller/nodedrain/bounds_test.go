package nodedrain_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestStatusStaysBounded: a node with more blocked pods than status.blockers
// lists, each with a name near the longest Kubernetes allows. The drain
// lists MaxBlockers of them and counts the rest in blockersOmitted, and no
// condition message is longer than MaxMessage runes; a cut one ends with
// "…".
func TestStatusStaysBounded(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: "bounded"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "bounded", Count: 1, Labels: sel})
	ns := testenv.Namespace(t, e.c)
	const pods = v1alpha1.MaxBlockers + 3
	for i := range pods {
		// Bare pods are blocked (pods.unmanaged: Block); the long names make
		// the conditions that name a few of them long.
		name := fmt.Sprintf("bounded-%02d-", i) + strings.Repeat("x", 230)
		p := devcluster.BarePod(ns, name, nodes[0])
		p.Labels = map[string]string{devcluster.AppLabel: "bounded"}
		if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	drainNode(t, e, nodes[0])
	nd := e.waitDrain(t, nodes[0], "blocked by every pod", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Blocked == pods && meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionPodsEvicted) != nil
	})
	t.Logf("status: %s", testenv.DescribeDrain(nd))
	if len(nd.Status.Blockers) != v1alpha1.MaxBlockers || nd.Status.BlockersOmitted != pods-v1alpha1.MaxBlockers {
		t.Errorf("%d blockers listed, %d omitted; want %d and %d", len(nd.Status.Blockers), nd.Status.BlockersOmitted,
			v1alpha1.MaxBlockers, pods-v1alpha1.MaxBlockers)
	}
	cut := 0
	for _, c := range nd.Status.Conditions {
		n := utf8.RuneCountInString(c.Message)
		if n > v1alpha1.MaxMessage {
			t.Errorf("condition %s message has %d runes, want at most %d", c.Type, n, v1alpha1.MaxMessage)
		}
		if n == v1alpha1.MaxMessage {
			cut++
			if !strings.HasSuffix(c.Message, "…") {
				t.Errorf("condition %s message is cut without a mark: ...%s", c.Type, c.Message[len(c.Message)-20:])
			}
		}
	}
	if cut == 0 {
		t.Errorf("no condition message was cut; the test's pod names are meant to make PodsEvicted's too long")
	}
}
