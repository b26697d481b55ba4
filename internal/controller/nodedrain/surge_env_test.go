package nodedrain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/requests"
	"github.com/vacate-dev/vacate/internal/surge"
)

// surgeGate is a readiness gate of the surge tests' own: the test makes a
// pod of Deployment web Ready by setting it, so a replacement is Ready only
// when the test says.
const surgeGate = "test.vacate.dev/ready"

// surgeFixture is Deployment web (one replica, gated by surgeGate, Ready)
// on node, behind PDB web (minAvailable 1: its eviction needs a surge),
// under DrainPolicy prefix (surge.pods All) over node and spare, a node
// without pods that joined after web's pod was placed.
type surgeFixture struct {
	ns, node, spare string
	pod             corev1.Pod
}

// newSurgeFixture builds the fixture; policy may change the DrainPolicy
// before it is created, rs web's template (nil: as is).
func newSurgeFixture(t *testing.T, e *env, prefix string, policy func(*v1alpha1.DrainPolicySpec), tpl func(*corev1.PodTemplateSpec)) *surgeFixture {
	t.Helper()
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: prefix}
	node := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix + "-a", Count: 1, Labels: sel})[0]
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefix}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: sel},
		Surge:        v1alpha1.Surge{Pods: v1alpha1.SurgeAll},
	}}
	if policy != nil {
		policy(&dp.Spec)
	}
	create(t, e, dp)
	ns := testenv.Namespace(t, e.c)
	dep := devcluster.Deployment(ns, "web", 1)
	dep.Spec.Template.Spec.NodeSelector = sel
	dep.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: surgeGate}}
	if tpl != nil {
		tpl(&dep.Spec.Template)
	}
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "1", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"})
	var pod corev1.Pod
	testutil.Eventually(t, time.Minute, "web's pod running", func() error {
		list, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: web.String()})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Status.PodIP == "" {
			return fmt.Errorf("%d pods, none with an address", len(list.Items))
		}
		pod = list.Items[0]
		return nil
	})
	setGate(t, e, &pod)
	if _, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, web, 1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, e.c.Client, ns, "web", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	spare := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: prefix + "-b", Count: 1, Labels: sel})[0]
	return &surgeFixture{ns: ns, node: node, spare: spare, pod: pod}
}

// setGate sets surgeGate True on a pod.
func setGate(t *testing.T, e *env, p *corev1.Pod) {
	t.Helper()
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","lastTransitionTime":%q}]}}`, surgeGate, time.Now().UTC().Format(time.RFC3339))
	if _, err := e.c.Client.CoreV1().Pods(p.Namespace).Patch(testenv.Context(t), p.Name, types.StrategicMergePatchType, []byte(patch),
		metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// replacements are the pods of the namespace that carry vacate's label
// vacate.dev/surge-of and an owner reference to a NodeDrain: the ones
// vacate created.
func replacements(t *testing.T, e *env, ns string) []corev1.Pod {
	t.Helper()
	list, err := e.c.Client.CoreV1().Pods(ns).List(testenv.Context(t), metav1.ListOptions{LabelSelector: surge.LabelOf})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		for _, ref := range p.OwnerReferences {
			if ref.Kind == "NodeDrain" {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// withdraw removes the test's requester from the drain: it undoes, and
// stays (Pending).
func withdraw(t *testing.T, e *env, node string) {
	t.Helper()
	ctx := testenv.Context(t)
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	if _, err := requests.Withdraw(ctx, e.cl, nd, "cli:test"); err != nil {
		t.Fatal(err)
	}
}

// dropFinalizers removes a pod's finalizers when the test ends.
func dropFinalizers(t *testing.T, e *env, ns, name string) {
	t.Helper()
	t.Cleanup(func() {
		_, _ = e.c.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
}
