package operator_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestHookCallsStopWithTheLeader runs the operator with a pod's HTTP hook
// in progress, then ends the operator's leader context (as a lost Lease or a
// shutdown does): the prober's background conversations end with it, and
// the app hears nothing more.
func TestHookCallsStopWithTheLeader(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cl := testenv.DrainClient(t, c)
	sel := map[string]string{"pool": "stop-hook"}
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "stop-hook", Count: 1, Labels: sel})[0]
	ns := testenv.Namespace(t, c)
	policy := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "stop-hook"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: sel},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}}
	if err := cl.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), policy) })
	const port = 18091
	d := devcluster.Deployment(ns, "app", 1)
	d.Spec.Template.Spec.NodeSelector = sel
	d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "app"}), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	ln, err := net.Listen("tcp", net.JoinHostPort(pods[0].Status.PodIP, fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		_, _ = w.Write([]byte(`{"state":"InProgress","message":"moving data","remaining":10}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	_, stop := testenv.StartController(t, c)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
	})
	nd := testutil.NodeDrain(node, "", "cli:test")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = cl.Delete(bg, nd)
		_ = cl.Patch(bg, nd, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	testutil.Eventually(t, time.Minute, "the hook to be polled", testutil.Holds(func() bool { return calls.Load() >= 3 }))

	t.Log("ending the operator's leader context")
	stopped = true
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A call already on its way may still arrive; after that, nothing.
	time.Sleep(500 * time.Millisecond)
	before := calls.Load()
	quiet := 5 * time.Second // five poll periods of the prober
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, quiet, true, func(context.Context) (bool, error) {
		return calls.Load() > before, nil
	})
	if err == nil {
		t.Errorf("the app was called again after the operator stopped (%d calls, %d when it stopped): the prober outlives its leader", calls.Load(), before)
	}
}
