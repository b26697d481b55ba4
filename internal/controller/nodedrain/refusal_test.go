package nodedrain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	vtestutil "github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// refusedPodWatch watches a namespace's pods for the whole test and records
// every pod that is evicted (gets a deletion timestamp, or is deleted) while
// refusing says the API server refuses its eviction.
type refusedPodWatch struct {
	refusing atomic.Bool
	mu       sync.Mutex
	evicted  []string
}

func watchRefusedPods(t *testing.T, e *env, ns string) *refusedPodWatch {
	t.Helper()
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(testenv.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rw := &refusedPodWatch{}
	rw.refusing.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !rw.refusing.Load() {
				continue
			}
			if ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
				rw.mu.Lock()
				rw.evicted = append(rw.evicted, p.Name)
				rw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return rw
}

// allow ends the refusal (call it before removing its cause) and checks no
// pod left while it held.
func (rw *refusedPodWatch) allow(t *testing.T) {
	t.Helper()
	rw.refusing.Store(false)
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if len(rw.evicted) > 0 {
		t.Errorf("pods evicted while the API server refused their eviction: %v", rw.evicted)
	}
}

// onePod runs Deployment name with one pod on one of the nodes matching sel
// and returns the pod.
func onePod(t *testing.T, e *env, ns, name string, sel map[string]string) corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	d := devcluster.Deployment(ns, name, 1)
	d.Spec.Template.Spec.NodeSelector = sel
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), 1, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return pods[0]
}

// drainNode requests the node's drain and deletes it when the test ends.
func drainNode(t *testing.T, e *env, node string) {
	t.Helper()
	nd := vtestutil.NodeDrain(node, "", "cli:test")
	if err := e.cl.Create(testenv.Context(t), nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })
}

// blockerOf returns the drain's blocker of the pod, if it has one.
func blockerOf(nd *v1alpha1.NodeDrain, ns, pod string) (v1alpha1.Blocker, bool) {
	for _, b := range nd.Status.Blockers {
		if b.Pod == ns+"/"+pod {
			return b, true
		}
	}
	return v1alpha1.Blocker{}, false
}

// denyEvictions installs a ValidatingAdmissionPolicy and its binding that
// deny creating pods/eviction for the pods of ns whose name starts with
// prefix, with the given reason, and waits until the API server applies it
// (a dry-run eviction of pod is refused with the reason's code). The
// Eviction object carries none of the pod's labels, so the policy selects
// pods by name: an objectSelector on pod labels never matches an eviction.
func denyEvictions(t *testing.T, e *env, name, ns, prefix, pod string, reason metav1.StatusReason) (remove func()) {
	t.Helper()
	ctx := testenv.Context(t)
	adm := e.c.Client.AdmissionregistrationV1()
	vap := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
				}}},
			},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("!object.metadata.name.startsWith('%s')", prefix),
				Message:    "evictions of " + prefix + "* are frozen during the audit", Reason: &reason,
			}},
		}}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	remove = func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(remove)
	waitEvictionAnswer(t, e, ns, pod, fmt.Sprintf("ValidatingAdmissionPolicy %s to deny with %s", name, reason), func(err error) bool {
		var se apierrors.APIStatus
		return errors.As(err, &se) && se.Status().Reason == reason && strings.Contains(se.Status().Message, name)
	})
	return remove
}

// denyWith changes the reason the policy denies with.
func denyWith(t *testing.T, e *env, name string, reason metav1.StatusReason) {
	t.Helper()
	vaps := e.c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vap, err := vaps.Get(testenv.Context(t), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		vap.Spec.Validations[0].Reason = &reason
		_, err = vaps.Update(testenv.Context(t), vap, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitEvictionAnswer makes dry-run evictions of the pod until the answer
// satisfies ok.
func waitEvictionAnswer(t *testing.T, e *env, ns, pod, what string, ok func(error) bool) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(testenv.Context(t), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = e.c.Client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: the last dry-run eviction answered %v", what, last)
	}
}

// TestEvictionDeniedByAdmissionPolicy: a ValidatingAdmissionPolicy denies
// the pod's eviction, first with reason Forbidden (403), then with reason
// Invalid (422). Each shows as a blocker of its own with the API server's
// message, is counted in vacate_pods_blocked, and the pod stays; once the
// policy is gone the pod is evicted and the drain ends.
func TestEvictionDeniedByAdmissionPolicy(t *testing.T) {
	e := startEnv(t)
	sel := map[string]string{testLabel: "denied"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "denied", Count: 2, Labels: sel})
	ns := testenv.Namespace(t, e.c)
	pod := onePod(t, e, ns, "audited", sel)
	target := pod.Spec.NodeName
	t.Logf("pod %s runs on %s (nodes %v)", pod.Name, target, nodes)
	refused := watchRefusedPods(t, e, ns)
	policy := "vacate-test-" + ns
	remove := denyEvictions(t, e, policy, ns, "audited-", pod.Name, metav1.StatusReasonForbidden)

	t.Log("draining the node while the policy denies the eviction with 403")
	drainNode(t, e, target)
	blocked := e.waitDrain(t, target, "blocker EvictionForbidden", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b, ok := blockerOf(nd, ns, pod.Name)
		return ok && b.Reason == v1alpha1.BlockerForbidden
	})
	t.Logf("status while forbidden: %s", testenv.DescribeDrain(blocked))
	b, _ := blockerOf(blocked, ns, pod.Name)
	if want := "ValidatingAdmissionPolicy '" + policy + "' with binding '" + policy + "' denied request: evictions of audited-* are frozen during the audit"; !strings.Contains(b.Detail, want) {
		t.Errorf("blocker detail %q, want the API server's message with %q", b.Detail, want)
	}
	if n := testutil.ToFloat64(metrics.PodsBlocked.WithLabelValues(v1alpha1.BlockerForbidden)); n < 1 {
		t.Errorf("vacate_pods_blocked{reason=%q} = %v, want at least 1", v1alpha1.BlockerForbidden, n)
	}
	if n := testutil.ToFloat64(metrics.EvictionsTotal.WithLabelValues(string(eviction.Forbidden))); n < 1 {
		t.Errorf("vacate_evictions_total{result=%q} = %v, want at least 1", eviction.Forbidden, n)
	}

	t.Log("changing the policy to deny with reason Invalid (one update: it denies throughout)")
	denyWith(t, e, policy, metav1.StatusReasonInvalid)
	waitEvictionAnswer(t, e, ns, pod.Name, "the policy to deny with Invalid", apierrors.IsInvalid)
	blocked = e.waitDrain(t, target, "blocker EvictionInvalid", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b, ok := blockerOf(nd, ns, pod.Name)
		return ok && b.Reason == v1alpha1.BlockerInvalid
	})
	t.Logf("status while invalid: %s", testenv.DescribeDrain(blocked))
	if b, _ := blockerOf(blocked, ns, pod.Name); !strings.Contains(b.Detail, "ValidatingAdmissionPolicy '"+policy+"'") {
		t.Errorf("blocker detail %q, want the API server's message naming %s", b.Detail, policy)
	}

	t.Log("removing the policy: the pod is evicted and the drain ends")
	refused.allow(t)
	remove()
	done := e.waitDrain(t, target, "Drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	if left := podsOn(t, e, ns, target); len(left) != 0 {
		t.Errorf("pods left on the drained node: %v", names(left))
	}
}

// TestPodWithTwoPDBsIsExplained: two PDBs select the pod, both allowing a
// disruption; the API server refuses its eviction with a 500. The blocker
// says MultiplePDBs and names both; once one PDB is deleted the pod is
// evicted.
func TestPodWithTwoPDBsIsExplained(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	sel := map[string]string{testLabel: "twopdbs"}
	testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "twopdbs", Count: 2, Labels: sel})
	ns := testenv.Namespace(t, e.c)
	pod := onePod(t, e, ns, "shared", sel)
	target := pod.Spec.NodeName
	for _, name := range []string{"shared-a", "shared-b"} {
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, name, "shared", "", "1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := devcluster.WaitForPDB(ctx, cs, ns, name, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	refused := watchRefusedPods(t, e, ns)

	t.Log("draining the node: each PDB allows a disruption, but together they make the API server answer 500")
	drainNode(t, e, target)
	blocked := e.waitDrain(t, target, "blocker MultiplePDBs", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b, ok := blockerOf(nd, ns, pod.Name)
		return ok && b.Reason == v1alpha1.BlockerMultiplePDBs
	})
	t.Logf("status while refused: %s", testenv.DescribeDrain(blocked))
	b, _ := blockerOf(blocked, ns, pod.Name)
	if want := "PodDisruptionBudget " + ns + "/shared-a, " + ns + "/shared-b"; b.Holder != want {
		t.Errorf("blocker holder %q, want %q", b.Holder, want)
	}
	if !strings.Contains(b.Detail, "more than one PodDisruptionBudget") {
		t.Errorf("blocker detail %q, want the API server's message", b.Detail)
	}

	t.Log("deleting PDB shared-b: the pod is evicted")
	refused.allow(t)
	if err := cs.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "shared-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	done := e.waitDrain(t, target, "Drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	if left := podsOn(t, e, ns, target); len(left) != 0 {
		t.Errorf("pods left on the drained node: %v", names(left))
	}
}

// throttlingEvictor answers every eviction with a 429 that no PDB caused
// (as API Priority and Fairness does) while throttle is set, and calls the
// API server otherwise.
type throttlingEvictor struct {
	throttle atomic.Bool
	calls    atomic.Int32
	next     eviction.EvictFunc
}

func (te *throttlingEvictor) evict(ctx context.Context, ev *policyv1.Eviction) error {
	if te.throttle.Load() {
		te.calls.Add(1)
		return apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
	}
	return te.next(ctx, ev)
}

// runThrottledController runs the NodeDrain controller alone, its evictions
// going through te.
func runThrottledController(t *testing.T, c *devcluster.Cluster, te *throttlingEvictor) {
	t.Helper()
	runSolo(t, c, solo{evict: func(next eviction.EvictFunc) eviction.EvictFunc { te.next = next; return te.evict }})
}

// TestThrottledEvictionIsNeverAPDB: the API server answers the pod's
// evictions with 429 and no DisruptionBudget cause. The pod has a PDB that
// allows a disruption; the blocker is EvictionThrottled held by "API server
// throttling" with the API server's message, never PodDisruptionBudget.
// When the throttling ends the pod is evicted.
func TestThrottledEvictionIsNeverAPDB(t *testing.T) {
	c := testenv.Start(t)
	e := &env{c: c, cl: testenv.DrainClient(t, c)}
	ctx := testenv.Context(t)
	te := &throttlingEvictor{}
	te.throttle.Store(true)
	runThrottledController(t, c, te)
	sel := map[string]string{testLabel: "throttled"}
	testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "throttled", Count: 2, Labels: sel})
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "throttled"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: sel},
		Concurrency:  v1alpha1.Concurrency{BatchWindow: &metav1.Duration{}},
	}}
	if err := e.cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), dp) })
	ns := testenv.Namespace(t, c)
	pod := onePod(t, e, ns, "busy", sel)
	target := pod.Spec.NodeName
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "busy", "busy", "", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "busy", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	refused := watchRefusedPods(t, e, ns)

	t.Log("draining the node while every eviction is throttled")
	drainNode(t, e, target)
	var asPDB []string
	blocked := e.waitDrain(t, target, "blocker EvictionThrottled", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		b, ok := blockerOf(nd, ns, pod.Name)
		if ok && b.Reason == v1alpha1.BlockerPDB {
			asPDB = append(asPDB, b.Detail)
		}
		return ok && b.Reason == v1alpha1.BlockerThrottled
	})
	t.Logf("status while throttled: %s", testenv.DescribeDrain(blocked))
	if len(asPDB) > 0 {
		t.Errorf("throttling was reported as a PodDisruptionBudget: %v", asPDB)
	}
	b, _ := blockerOf(blocked, ns, pod.Name)
	if b.Holder != v1alpha1.HolderThrottling || b.Detail != "Too many requests, please try again later." {
		t.Errorf("blocker holder %q detail %q, want %q and the API server's message", b.Holder, b.Detail, v1alpha1.HolderThrottling)
	}
	if te.calls.Load() == 0 {
		t.Error("no eviction was attempted")
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
		t.Errorf("the throttled pod is gone or terminating: %v", err)
	}

	t.Log("the throttling ends: the pod is evicted")
	refused.allow(t)
	te.throttle.Store(false)
	done := e.waitDrain(t, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		if b, ok := blockerOf(nd, ns, pod.Name); ok && b.Reason == v1alpha1.BlockerPDB {
			asPDB = append(asPDB, b.Detail)
		}
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	if len(asPDB) > 0 {
		t.Errorf("throttling was reported as a PodDisruptionBudget: %v", asPDB)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod %s after the drain: %v, want it gone", types.NamespacedName{Namespace: ns, Name: pod.Name}, err)
	}
}
