package operator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/controller"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/scoped"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/surge"
)

// TestScopedNodePodsAgreeWithTheAPI: a node's pods read from its scope of
// the pod cache (controller.NewPods, what the controllers read) are those
// the API server lists on that node, and the ones the test bound there, as
// pods are created on two nodes and deleted; a second read while nothing
// changed returns the same objects, not copies. The client that reads pods
// through the cache finds a scoped pod, answers "not found" for one a scope
// saw deleted, reads a pod no scope holds from the API server, and refuses
// a list of pods that names no scope.
func TestScopedNodePodsAgreeWithTheAPI(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "nodepods", Count: 3, Labels: map[string]string{"pool": "nodepods"}})
	ns := testenv.Namespace(t, c)
	pods, err := controller.NewPods(c.RESTConfig, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- pods.Start(cctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	nodePods := func(ctx context.Context, n string) ([]*corev1.Pod, error) { return pods.List(ctx, scoped.Node(n)) }
	listed := func(ctx context.Context, n string) ([]*corev1.Pod, error) {
		l, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			return nil, err
		}
		out := make([]*corev1.Pod, 0, len(l.Items))
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return out, nil
	}
	want := map[string][]string{}
	names := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			if p.Namespace == ns {
				out = append(out, p.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	agree := func(stage string) {
		t.Helper()
		for _, n := range nodes[:2] {
			testutil.Eventually(t, time.Minute, fmt.Sprintf("%s: the pods of %s from the index", stage, n), func() error {
				got, err := nodePods(ctx, n)
				if err != nil {
					return err
				}
				fromList, err := listed(ctx, n)
				if err != nil {
					return err
				}
				if !slices.Equal(names(got), want[n]) || !slices.Equal(names(fromList), want[n]) {
					return fmt.Errorf("index %v, list %v, bound %v", names(got), names(fromList), want[n])
				}
				return nil
			})
		}
	}
	for i, n := range []int{0, 0, 1, 0, 1} {
		p := testutil.Pod(fmt.Sprintf("p%d", i)).Namespace(ns).OnNode(nodes[n]).Obj()
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want[nodes[n]] = append(want[nodes[n]], p.Name)
	}
	agree("created")

	first, err := nodePods(ctx, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	again, err := nodePods(ctx, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if j := slices.Index(again, first[i]); j < 0 {
			t.Errorf("pod %s/%s: a second read returned another object, not the cache's own", first[i].Namespace, first[i].Name)
		}
	}

	zero := int64(0)
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "p1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	want[nodes[0]] = slices.DeleteFunc(want[nodes[0]], func(s string) bool { return s == "p1" })
	agree("p1 deleted")
	checkPodClient(t, c, pods, ns, nodes, len(want[nodes[1]]))
}

// checkPodClient: PodClient finds p0, a pod of nodes[0]'s scope; answers
// "not found" for p1, which that scope saw deleted; reads a pod of
// nodes[2], which no scope holds, from the API server without starting
// its node's scope; refuses a list of a namespace's pods; and lists the
// onSecond pods of nodes[1] in ns (a node the test shares with earlier runs
// of it holds theirs too).
func checkPodClient(t *testing.T, c *devcluster.Cluster, pods *controller.Pods, ns string, nodes []string, onSecond int) {
	t.Helper()
	ctx := testenv.Context(t)
	live, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pc := controller.PodClient{Client: live, Pods: pods, Live: live}
	elsewhere := testutil.Pod("elsewhere").Namespace(ns).OnNode(nodes[2]).Obj()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, elsewhere, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p0"}, got); err != nil || got.Spec.NodeName != nodes[0] {
		t.Errorf("a scoped pod: %v, on %q", err, got.Spec.NodeName)
	}
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p1"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("a pod its scope saw deleted: %v, want not found", err)
	}
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elsewhere"}, got); err != nil || got.Spec.NodeName != nodes[2] {
		t.Errorf("a pod no scope holds, from the API server: %v, on %q", err, got.Spec.NodeName)
	}
	if scopes, _ := pods.Scopes(); slices.Contains(scopes, scoped.Node(nodes[2])) {
		t.Errorf("reading one pod of %s started its node's scope: %v", nodes[2], scopes)
	}
	if err := pc.List(ctx, &corev1.PodList{}, client.InNamespace(ns)); err == nil {
		t.Error("a list of a namespace's pods was served: it names no scope")
	}
	// A pod leaving a scope by label (a replacement handed over loses
	// vacate.dev/surge-of) is not gone: it is read from the API server.
	rep := testutil.Pod("handed-over").Namespace(ns).OnNode(nodes[2]).Labels(surge.LabelOf, "uid").Obj()
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, rep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the replacement in its label's scope", func() error {
		if _, state := pods.Get(ns, rep.Name); state != scoped.Found {
			return fmt.Errorf("lookup %d", state)
		}
		return nil
	})
	patch := []byte(`{"metadata":{"labels":{"` + surge.LabelOf + `":null}}}`)
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, rep.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the replacement out of its label's scope", func() error {
		if _, state := pods.Get(ns, rep.Name); state != scoped.Unknown {
			return fmt.Errorf("lookup %d", state)
		}
		return nil
	})
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: rep.Name}, got); err != nil {
		t.Errorf("a pod that left a scope by label: %v, want it read from the API server", err)
	}
	onNode := &corev1.PodList{}
	if err := pc.List(ctx, onNode, client.InNamespace(ns), client.MatchingFields{index.PodNodeName: nodes[1]}); err != nil || len(onNode.Items) != onSecond {
		t.Errorf("a list of %s's pods: %v, %d pods, want %d", nodes[1], err, len(onNode.Items), onSecond)
	}
}
