package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/leader"
	"github.com/vacate-dev/vacate/internal/serving"
	"github.com/vacate-dev/vacate/internal/surge"
	"github.com/vacate-dev/vacate/internal/version"
)

// TestPlanAndControllerTakeTheSameNextStep: for every pod of a node, the
// next step 'vacate plan' shows (NEXT, "next" in JSON) is the step the
// controller then takes with it: both ask drain.Next. One pod of each step
// the planner knows: a pod annotated skip (Stay), one annotated
// wait-completed (Wait), a pod of no controller (Blocked), a pod an
// EvacuationProvider protects (Held), the only pod of a Deployment whose
// PDB allows no disruption, annotated to surge (Surge), an endpoint-aware
// pod (OutOfService) and a plain Deployment's pod (Evict).
func TestPlanAndControllerTakeTheSameNextStep(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-next", Count: 1, Labels: map[string]string{"pool": "cli-next"}})[0]
	pods := nextScene(t, c, cl, node)
	planner := newUser(t, c, "next-planner")
	bindUserRole(t, c, "next-planner")

	planned := map[string]string{}
	for _, pp := range planOf(t, planner, node).Pods {
		planned[pp.Pod] = pp.Next
	}
	for key, want := range pods {
		if planned[key] != string(want) {
			t.Errorf("plan: pod %s next %q, want %s", key, planned[key], want)
		}
	}

	planner.must(ExitOK, "drain", node)
	t.Cleanup(func() { planner.vacate("cancel", node) })
	var taken map[string]drain.Step
	testutil.Eventually(t, 2*time.Minute, "the controller taking each pod's first step", func() error {
		var err error
		if taken, err = stepsTaken(t, c, cl, node, pods); err != nil {
			return err
		}
		for key, want := range pods {
			if taken[key] != want {
				return fmt.Errorf("pod %s: the controller took %q so far (plan said %s)", key, taken[key], want)
			}
		}
		return nil
	})
	for key := range pods {
		if string(taken[key]) != planned[key] {
			t.Errorf("pod %s: plan said %s, the controller took %s", key, planned[key], taken[key])
		}
	}
}

// nextScene creates one pod of each step on the node, and says which step
// each takes, by namespace/name: the DrainPolicy cli-next (pods annotated
// vacate.dev/surge are surged; an endpoint-aware pod waits 10m after its
// endpoints are gone) and the EvacuationProvider cli-next-held, which no
// one answers.
func nextScene(t *testing.T, c *devcluster.Cluster, cl client.Client, node string) map[string]drain.Step {
	t.Helper()
	ctx := testenv.Context(t)
	ns := testenv.Namespace(t, c)
	labelNamespace(t, c, ns, map[string]string{"test.vacate.dev/next": "yes"})
	createObject(t, cl, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cli-next"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cli-next"}},
		Surge:        v1alpha1.Surge{Pods: v1alpha1.SurgeAnnotated},
		Endpoints:    v1alpha1.Endpoints{SettleTime: &metav1.Duration{Duration: 10 * time.Minute}},
	}})
	createObject(t, cl, &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "cli-next-held"}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "next-held"}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test.vacate.dev/next": "yes"}},
	}})
	steps := map[string]drain.Step{}
	for name, step := range map[string]drain.Step{"kept": drain.StepStay, "waits": drain.StepWait, "bare": drain.StepBlocked} {
		p := devcluster.BarePod(ns, name, node)
		if v := map[string]string{"kept": drain.AnnotationSkip, "waits": drain.AnnotationWaitCompleted}[name]; v != "" {
			p.Annotations = map[string]string{drain.PodAnnotation: v}
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		steps[ns+"/"+name] = step
	}
	steps[ns+"/"+appOn(t, c, ns, "next-held", node, 1, nil)[0].Name] = drain.StepHeld
	steps[ns+"/"+appOn(t, c, ns, "next-plain", node, 1, nil)[0].Name] = drain.StepEvict
	surged := appOn(t, c, ns, "next-surged", node, 1, map[string]string{surge.Annotation: "true"})[0]
	createObject(t, cl, devcluster.PDB(ns, "next-surged", "next-surged", "1", ""))
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "next-surged", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	steps[ns+"/"+surged.Name] = drain.StepSurge
	steps[ns+"/"+gatedOn(t, c, ns, node).Name] = drain.StepOutOfService
	return steps
}

// gatedOn runs one endpoint-aware pod (the readiness gate
// vacate.dev/serving) on the node, and returns it once Ready: vacate's
// serving controller sets the gate's condition.
func gatedOn(t *testing.T, c *devcluster.Cluster, ns, node string) corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	d := devcluster.Deployment(ns, "next-gated", 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: serving.Condition}}
	d.Spec.Template.Labels[v1alpha1.LabelEndpointAware] = "true" // declared by hand: labelled too
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "next-gated"}), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return pods[0]
}

// stepsTaken says, for each pod, the step the controller took with it so
// far, from what it did: its blocker's reason (an evacuation or hook holds
// it, it waits for its surge, for its endpoints, for its PDB's budget, or
// the planner blocks it or waits for it), or the pod gone (evicted), or
// left alone on the node (it stays).
func stepsTaken(t *testing.T, c *devcluster.Cluster, cl client.Client, node string, pods map[string]drain.Step) (map[string]drain.Step, error) {
	t.Helper()
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(testenv.Context(t), client.ObjectKey{Name: node}, nd); err != nil {
		return nil, err
	}
	byReason := map[string]drain.Step{
		v1alpha1.BlockerEvacuation: drain.StepHeld, v1alpha1.BlockerHTTPHook: drain.StepHeld,
		v1alpha1.BlockerSurge: drain.StepSurge, v1alpha1.BlockerSurgeFailed: drain.StepSurge,
		v1alpha1.BlockerEndpoints: drain.StepOutOfService, v1alpha1.BlockerPDB: drain.StepEvict,
		string(drain.ReasonUnmanaged): drain.StepBlocked, string(drain.ReasonWaitCompletion): drain.StepWait,
	}
	taken := map[string]drain.Step{}
	for _, b := range nd.Status.Blockers {
		if step, ok := byReason[b.Reason]; ok {
			taken[b.Pod] = step
		} else {
			taken[b.Pod] = drain.Step("blocked by " + b.Reason)
		}
	}
	for key := range pods {
		if _, ok := taken[key]; ok {
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		p, err := c.Client.CoreV1().Pods(ns).Get(testenv.Context(t), name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), err == nil && !p.DeletionTimestamp.IsZero():
			taken[key] = drain.StepEvict
		case err != nil:
			return nil, err
		case nd.Status.Phase == v1alpha1.PhaseEvicting || nd.Status.Phase == v1alpha1.PhaseEvacuating:
			taken[key] = drain.StepStay // the drain runs, and leaves it alone
		}
	}
	return taken, nil
}

// TestPlanShowsThePodsADrainWouldAsk: where the leading controller's Lease
// says its drains request through Kubernetes' EvictionRequest API, plan
// shows the next step of a pod that declares eviction responders as
// Request (the drain asks for it with an EvictionRequest) and of a plain pod
// as Evict; where it says off, both are Evict. A person with vacate-user
// reads the Lease.
func TestPlanShowsThePodsADrainWouldAsk(t *testing.T) {
	c := testenv.Start(t)
	testenv.DrainClient(t, c) // vacate's CRDs
	ns := testenv.Namespace(t, c)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-ask", Count: 1})[0]
	d := devcluster.Deployment(ns, "asked", 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	d.Spec.Template.Spec.EvictionResponders = []corev1.EvictionResponder{{Name: "backup.example.com/mover", Priority: ptr.To[int32](5000)}}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(testenv.Context(t), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asked, err := devcluster.WaitForPodsReady(testenv.Context(t), c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "asked"}), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	plain := appOn(t, c, ns, "plain", node, 1, nil)
	planner := newUser(t, c, "ask-planner")
	bindUserRole(t, c, "ask-planner")
	for state, want := range map[string]drain.Step{leader.EvictionRequestsCoordinating: drain.StepRequest, leader.EvictionRequestsRequesting: drain.StepRequest,
		leader.EvictionRequestsOff: drain.StepEvict} {
		labelLease(t, c, holdLease(t, c, "ask-controller"), leader.LeaseLabels(version.Info{Version: "v1.0.0"}, state))
		next := map[string]string{}
		for _, pp := range planOf(t, planner, node).Pods {
			next[pp.Pod] = pp.Next
		}
		if got := next[ns+"/"+asked[0].Name]; got != string(want) {
			t.Errorf("Lease %s: the pod with responders is planned %q, want %s", state, got, want)
		}
		if got := next[ns+"/"+plain[0].Name]; got != string(drain.StepEvict) {
			t.Errorf("Lease %s: the plain pod is planned %q, want Evict", state, got)
		}
	}
}

// labelLease sets the labels of the Lease namespace/name.
func labelLease(t *testing.T, c *devcluster.Cluster, key string, l map[string]string) {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	lease, err := c.Client.CoordinationV1().Leases(ns).Get(testenv.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Labels = l
	if _, err := c.Client.CoordinationV1().Leases(ns).Update(testenv.Context(t), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
