package rbac

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/operator"
)

// TestHookedDrainProvesItsCaller: vacate-controller, run as its service
// account with the installed RBAC (the Role that lets it request its own
// tokens), drains a node whose pod's hook is the real vacate-hook checking
// callers: the hook is called with a token it verifies, runs its evacuate
// once, and the drain's status says the hook verified its caller; the
// controller counts the hook's answers (vacate_hook_calls_total).
func TestHookedDrainProvesItsCaller(t *testing.T) {
	c := testenv.Start(t)
	cl := install(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "hookdrain", Count: 1, Labels: map[string]string{"pool": "hookdrain"}})[0]
	ns := testenv.Namespace(t, c)
	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hookdrain"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "hookdrain"}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
		Pods:         v1alpha1.PodPolicy{Unmanaged: "Delete"},
	}}
	if err := cl.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), policy) })
	_, portText, _ := net.SplitHostPort(testutil.FreeAddr(t))
	port, _ := strconv.Atoi(portText)
	pod := devcluster.BarePod(ns, "db-0", node)
	pod.Annotations = map[string]string{hook.AnnotationPort: portText}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := startHookSidecar(t, c, &pods[0], port)
	// The controller's metrics are this process's: its hook calls are counted.
	completedBefore := promtest.ToFloat64(metrics.HookCalls.WithLabelValues(http.MethodGet, hook.Completed))

	opts := operator.InProcessOptions()
	opts.Controllers.AllowLoopbackHooks = true // the dev cluster's pods live on 127.0.0.0/8
	stop, err := operator.Start(context.Background(), asServiceAccount(c), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("controller exited with %v", err)
		}
	})
	nd := testutil.NodeDrain(node, "", "test")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nd) })
	verified := false
	done := testenv.WaitForDrain(t, cl, node, "drained, its hook called with a token it verified", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		for _, h := range nd.Status.Hooks {
			if h.CallerVerified != nil && *h.CallerVerified {
				verified = true
			}
		}
		return nd.Status.Phase == v1alpha1.PhaseDrained
	}, testenv.DescribeDrain)
	if !verified {
		t.Errorf("status.hooks never said the hook verified its caller")
	}
	if got := promtest.ToFloat64(metrics.HookCalls.WithLabelValues(http.MethodGet, hook.Completed)); got <= completedBefore {
		t.Errorf("vacate_hook_calls_total{method=GET,result=Completed} %v, was %v: the hook's answer was not counted", got, completedBefore)
	}
	if lines := h.ranLines(t); len(lines) != 1 || lines[0] != fmt.Sprintf("%s %s", done.UID, done.Status.RunID) {
		t.Errorf("evacuate ran for %v, want once for drain %s run %s", lines, done.UID, done.Status.RunID)
	}
}
