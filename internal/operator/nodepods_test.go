package operator_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestCachedNodePodsAgreeWithTheList: a node's pods read from the pod
// informer's own index (index.CachedNodePods, what the controllers read)
// are those a List of the cache by spec.nodeName returns, and the ones the
// test bound there, as pods are created on two nodes and deleted; a second
// read while nothing changed returns the same objects, not copies.
func TestCachedNodePodsAgreeWithTheList(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "nodepods", Count: 2, Labels: map[string]string{"pool": "nodepods"}})
	ns := testenv.Namespace(t, c)
	var nodePods index.NodePods
	var listed index.NodePods
	testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		if err := index.Register(ctx, mgr); err != nil {
			return err
		}
		var err error
		nodePods, err = index.CachedNodePods(ctx, mgr.GetCache())
		listed = index.ListedNodePods(mgr.GetClient())
		return err
	})
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
		for _, n := range nodes {
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
}
