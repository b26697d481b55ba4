package nodedrain_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/serving"
)

// gatedWeb creates Deployment "web" of replicas endpoint-aware pods (the
// readiness gate in its template) spread over the nodes, its PDB
// (maxUnavailable 1) and a Service, and waits until every pod is Ready:
// which needs vacate's serving controller to set the gate's condition.
func gatedWeb(t *testing.T, e *env, ns string, sel map[string]string, replicas int32) {
	t.Helper()
	ctx := testenv.Context(t)
	cs := e.c.Client
	d := devcluster.Deployment(ns, "web", replicas)
	d.Spec.Template.Spec.NodeSelector = sel
	d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: serving.Condition}}
	d.Spec.Template.Labels[v1alpha1.LabelEndpointAware] = "true" // declared by hand: labelled too
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: devcluster.HostnameLabel,
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "web"}},
		NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor)}} // a cordoned node counts for nothing
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "web", "web", "", "1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{devcluster.AppLabel: "web"},
		Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
	}}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "web"}), int(replicas), 2*time.Minute)
	if err != nil {
		t.Fatalf("the gated pods never became Ready (vacate sets their gate's condition): %v", err)
	}
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		if c := serving.Get(&p); c == nil || c.Status != corev1.ConditionTrue || c.Reason != serving.ReasonServing {
			t.Errorf("pod %s: condition %s = %+v, want True (Serving)", p.Name, serving.Condition, c)
		}
	}
	// The tests drain one of these nodes: each must have a pod to move.
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(sel).String()})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if perNode[n.Name] == 0 {
			t.Fatalf("no web pod was placed on node %s (pods per node: %v)", n.Name, perNode)
		}
	}
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "web", replicas, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// endpointWatch follows, by polling the API server, the web pods and what
// the Service's EndpointSlices say of them.
type endpointWatch struct {
	mu sync.Mutex
	// notReady is the sample at which a pod was first seen listed not
	// ready, or no longer listed after it had been; deleting, the sample at
	// which it was first seen with a deletionTimestamp; outOfService, the
	// sample it was first seen with its condition False.
	notReady, deleting, outOfService map[types.UID]int
	listed                           map[types.UID]bool
	node                             map[types.UID]string
	name                             map[types.UID]string
	samples                          int
	stop                             func()
}

func watchEndpoints(t *testing.T, e *env, ns string) *endpointWatch {
	t.Helper()
	w := &endpointWatch{notReady: map[types.UID]int{}, deleting: map[types.UID]int{}, outOfService: map[types.UID]int{},
		listed: map[types.UID]bool{}, node: map[types.UID]string{}, name: map[types.UID]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.sample(ctx, e, ns)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(w.stop)
	return w
}

func (w *endpointWatch) sample(ctx context.Context, e *env, ns string) {
	slices, err := e.c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		return
	}
	pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	now := map[types.UID]bool{} // listed ready now
	seen := map[types.UID]bool{}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				continue
			}
			uid := ep.TargetRef.UID
			seen[uid] = true
			w.listed[uid] = true
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				now[uid] = true
			}
		}
	}
	for uid := range w.listed {
		if !now[uid] {
			if _, ok := w.notReady[uid]; !ok {
				w.notReady[uid] = w.samples
			}
		}
	}
	present := map[types.UID]bool{}
	for _, p := range pods.Items {
		present[p.UID] = true
		w.node[p.UID], w.name[p.UID] = p.Spec.NodeName, p.Name
		if _, ok := w.deleting[p.UID]; !ok && !p.DeletionTimestamp.IsZero() {
			w.deleting[p.UID] = w.samples
		}
		if _, ok := w.outOfService[p.UID]; !ok {
			if _, out := serving.OutOfService(&p); out {
				w.outOfService[p.UID] = w.samples
			}
		}
	}
	for uid := range w.node { // kwok deletes a pod at once: it may be gone before a sample sees it terminating
		if _, ok := w.deleting[uid]; !ok && !present[uid] {
			w.deleting[uid] = w.samples
		}
	}
}

// settle waits until the API server shows no pod of ns on node and a
// sample after that has been taken: the watch has seen every pod go.
func (w *endpointWatch) settle(t *testing.T, e *env, ns, node string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("pods of %s are still on %s: %v", ns, node, err)
	}
	w.mu.Lock()
	at := w.samples
	w.mu.Unlock()
	err = wait.PollUntilContextTimeout(testenv.Context(t), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.samples > at+1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// check: every pod of node that was deleted was out of service, and its
// endpoints showed it not ready, in an earlier sample than its deletion.
func (w *endpointWatch) check(t *testing.T, node string) int {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for uid, at := range w.deleting {
		if w.node[uid] != node {
			continue
		}
		n++
		out, wasOut := w.outOfService[uid]
		nr, wasNotReady := w.notReady[uid]
		switch {
		case !wasOut:
			t.Errorf("pod %s was deleted without being taken out of service", w.name[uid])
		case !wasNotReady:
			t.Errorf("pod %s was deleted while its EndpointSlice still showed it ready", w.name[uid])
		case out >= at || nr >= at:
			t.Errorf("pod %s: out of service at sample %d, endpoints not ready at sample %d, deleted at sample %d: want both before the deletion",
				w.name[uid], out, nr, at)
		}
	}
	return n
}

// TestEndpointAwareEviction (issue 15): pods with the readiness gate
// become Ready once vacate sets their condition; a drain takes each one
// out of service, waits until its EndpointSlice shows it not ready (and
// the settle time), and only then evicts it, one pod of the PDB at a time;
// no PDB is ever violated.
func TestEndpointAwareEviction(t *testing.T) {
	e := startEnv(t)
	sel := map[string]string{testLabel: "endpoints"}
	// EndpointSlices refuse loopback addresses: these nodes give their pods
	// private ones (no traffic goes to them in this test).
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "epa", Count: 3, Labels: sel, PodCIDR: "10.231.0.0/24"})
	target := nodes[0]
	ns := testenv.Namespace(t, e.c)
	gatedWeb(t, e, ns, sel, 6)
	guard := testenv.WatchPDBs(t, e.c, ns)
	w := watchEndpoints(t, e, ns)
	var before []string
	for _, p := range testenv.PodsOnNode(t, e.c, target) {
		if p.Namespace == ns {
			before = append(before, p.Name)
		}
	}

	drainUnder(t, e, target, "endpoints-test", v1alpha1.Endpoints{SettleTime: &metav1.Duration{Duration: time.Second}})
	e.waitDrain(t, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	w.settle(t, e, ns, target)
	if n := w.check(t, target); n != len(before) || n == 0 {
		t.Errorf("%d web pod(s) of %s were seen deleted; %d were there: %v", n, target, len(before), before)
	}
	guard.Check(t)
}

// TestEndpointAwareUndo (issue 15): a drain cancelled while a pod is out
// of service waiting for its settle time puts that pod back in service: it
// stays, and is Ready again.
func TestEndpointAwareUndo(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	sel := map[string]string{testLabel: "endpoints-undo"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "epu", Count: 2, Labels: sel, PodCIDR: "10.232.0.0/24"})
	target := nodes[0]
	ns := testenv.Namespace(t, e.c)
	gatedWeb(t, e, ns, sel, 4)

	nd := drainUnder(t, e, target, "endpoints-undo", v1alpha1.Endpoints{SettleTime: &metav1.Duration{Duration: 10 * time.Minute},
		Timeout: &metav1.Duration{Duration: time.Hour}})
	e.waitDrain(t, target, "a pod waiting out its settle time", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		for _, b := range nd.Status.Blockers {
			if b.Reason == v1alpha1.BlockerEndpoints {
				return true
			}
		}
		return false
	})
	out := outOfServiceOn(t, e, ns, target)
	if len(out) != 1 {
		t.Fatalf("pods out of service on %s: %v, want exactly one (one per PDB at a time)", target, out)
	}

	t.Log("cancelling the drain")
	if err := e.cl.Delete(ctx, nd); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, out[0], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := serving.Get(p)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == serving.ReasonRestored && devcluster.PodReady(p), nil
	})
	if err != nil {
		p, _ := e.c.Client.CoreV1().Pods(ns).Get(ctx, out[0], metav1.GetOptions{})
		t.Fatalf("pod %s was not put back in service and Ready after the cancel: %v; conditions %+v", out[0], err, p.Status.Conditions)
	}
	if p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, out[0], metav1.GetOptions{}); err != nil || !p.DeletionTimestamp.IsZero() {
		t.Errorf("pod %s was evicted after all (err %v)", out[0], err)
	}
}

// outOfServiceOn names the node's pods that are out of service.
func outOfServiceOn(t *testing.T, e *env, ns, node string) []string {
	t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(ns).List(testenv.Context(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if _, ok := serving.OutOfService(&p); ok {
			out = append(out, p.Name)
		}
	}
	return out
}

// TestEndpointAwareRefusedAfterAll (issue 15): a pod whose dry-run
// eviction passed but whose real eviction is denied (an admission policy
// that lets dry runs through) goes back in service, stays, and is Ready
// again; once the denial is lifted it is taken out and evicted.
func TestEndpointAwareRefusedAfterAll(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	sel := map[string]string{testLabel: "endpoints-refused"}
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "epr", Count: 2, Labels: sel, PodCIDR: "10.233.0.0/24"})
	target := nodes[0]
	ns := testenv.Namespace(t, e.c)
	gatedWeb(t, e, ns, sel, 2)

	t.Log("an admission policy denies real (not dry-run) evictions in the namespace")
	name := "deny-real-evictions-" + ns
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "request.dryRun == true", Message: "evictions are frozen in this namespace"}},
		}}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}}}}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unbind := func() error {
		return cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(func() { _ = unbind() })
	waitPolicyDenies(t, e, ns)

	drainUnder(t, e, target, "endpoints-refused", v1alpha1.Endpoints{SettleTime: &metav1.Duration{Duration: 0}})

	t.Log("waiting for the pod to be put back in service after its eviction was denied")
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + target})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if c := serving.Get(&p); c != nil && c.Reason == serving.ReasonRestored && c.Status == corev1.ConditionTrue {
				return p.DeletionTimestamp.IsZero(), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no pod on %s was put back in service after its eviction was denied: %v\n%s", target, err, describeGated(e, ns, target))
	}

	t.Log("lifting the denial: the drain goes on")
	if err := unbind(); err != nil {
		t.Fatal(err)
	}
	e.waitDrain(t, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
}

// describeGated is, for a failing test, the node's drain, its pods' conditions
// and what the namespace's EndpointSlices say of them.
func describeGated(e *env, ns, node string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	nd := &v1alpha1.NodeDrain{}
	if err := e.cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
		fmt.Fprintf(&b, "drain %s: %v\n", node, err)
	} else {
		fmt.Fprintf(&b, "drain %s: %s\n", node, testenv.DescribeDrain(nd))
	}
	pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s on %s uid %s deleting=%t ip %s\n", p.Name, p.Spec.NodeName, p.UID, !p.DeletionTimestamp.IsZero(), p.Status.PodIP)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s %s (%s)\n", c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime.UTC().Format(time.RFC3339))
		}
	}
	slices, err := e.c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "endpointslices: %v\n", err)
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			ref := ""
			if ep.TargetRef != nil {
				ref = ep.TargetRef.Name
			}
			fmt.Fprintf(&b, "slice %s (rv %s): %v %s ready=%v\n", s.Name, s.ResourceVersion, ep.Addresses, ref, ptr.Deref(ep.Conditions.Ready, true))
		}
	}
	return b.String()
}

// waitPolicyDenies waits until the API server enforces the policy: a real
// eviction of a pod that does not exist is denied before it is looked up.
func waitPolicyDenies(t *testing.T, e *env, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.c.Client.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-such-pod"}})
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	})
	if err != nil {
		t.Fatalf("the admission policy never denied an eviction: %v", err)
	}
}

// drainUnder drains node under a DrainPolicy of its own with these
// endpoints settings; both go when the test ends.
func drainUnder(t *testing.T, e *env, node, policy string, ep v1alpha1.Endpoints) *v1alpha1.NodeDrain {
	t.Helper()
	ctx := testenv.Context(t)
	pol := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: policy}, Spec: v1alpha1.DrainPolicySpec{Endpoints: ep}}
	if err := e.cl.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), pol) })
	nd := testutil.NodeDrain(node, pol.Name, "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })
	return nd
}
