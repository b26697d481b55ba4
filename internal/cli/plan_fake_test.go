package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// The tests in this file plan drains of a fake cluster (client-go's and
// controller-runtime's fake clients, no API server): TestPlanOutputIsPinned
// pins what plan prints for a fixture that meets most of what a plan
// decides, and TestPlanFailsOnlyForAReadItNeeds checks that a read the
// decisions do not need fails no plan.

var updatePlan = flag.Bool("update-plan", false, "rewrite testdata/plan from what vacate plan prints now")

// planT0 is the fixture's now.
var planT0 = time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)

// TestPlanOutputIsPinned: vacate plan prints, byte for byte, what
// testdata/plan holds, for four nodes of the fixture (planFixture) planned
// as they are, in Decommission, with a requester's overrides, and under
// another policy; and the same -o json for the first. Run with
// -update-plan to write the files again after a change meant to show.
func TestPlanOutputIsPinned(t *testing.T) {
	bob := &v1alpha1.Requester{Name: "cli:bob", Overrides: &v1alpha1.PodOverrides{DeleteUnmanaged: true, GracePeriodSeconds: ptr.To(int64(5))}}
	for name, o := range map[string]*planOptions{
		"as-is":        {},
		"decommission": {planChoices: planChoices{mode: "Decommission", allowLoopback: true}},
		"overrides":    {planChoices: planChoices{as: bob}},
		"plain-policy": {policy: "plain"},
	} {
		t.Run(name, func(t *testing.T) {
			o.clock = clocktesting.NewFakeClock(planT0)
			plans, err := o.plan(context.Background(), fakePlanSession(t), []string{"n1", "n2", "n3", "n4"})
			if err != nil {
				t.Fatal(err)
			}
			formats := []string{formatWide}
			if name == "as-is" {
				formats = append(formats, formatJSON)
			}
			for _, format := range formats {
				var out bytes.Buffer
				o.streams.Out = &out
				if err := o.write(plans, format, nil); err != nil {
					t.Fatal(err)
				}
				comparePinned(t, filepath.Join("testdata", "plan", name+"."+strings.Replace(format, formatWide, "txt", 1)), out.Bytes())
			}
		})
	}
}

// comparePinned compares got with the file at path, or writes it there
// under -update-plan.
func comparePinned(t *testing.T, path string, got []byte) {
	t.Helper()
	if *updatePlan {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update-plan to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("vacate plan printed, instead of %s:\n%s\n(run with -update-plan if the change is meant)", path, got)
	}
}

// TestPlanFailsOnlyForAReadItNeeds: plan reads the namespaces of a node's
// pods before it decides, but a namespace it may not read (secret) fails
// the plan only where a decision asks for its labels, as a read made when
// asked would: not under the built-in defaults (n3), but under a policy
// whose pods.annotationNamespaceSelector must judge the pod's annotation
// (n3 under pool-a), with the error such a read returns.
func TestPlanFailsOnlyForAReadItNeeds(t *testing.T) {
	o := &planOptions{clock: clocktesting.NewFakeClock(planT0)}
	if _, err := o.plan(context.Background(), fakePlanSession(t), []string{"n3"}); err != nil {
		t.Errorf("plan of n3 under the built-in defaults: %v; want no error (it needs no namespace's labels)", err)
	}
	o.policy = "pool-a"
	_, err := o.plan(context.Background(), fakePlanSession(t), []string{"n3"})
	if want := "permission denied while reading namespace secret"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("plan of n3 under pool-a: %v; want %q", err, want)
	}
}

// fakePlanSession is a session on a fake cluster holding planFixture.
func fakePlanSession(t *testing.T) *session {
	t.Helper()
	core, vacate := planFixture()
	cs := fake.NewSimpleClientset(core...)
	// The fake ignores field selectors: list a node's pods as the API
	// server does.
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		node, ok := a.(k8stesting.ListAction).GetListRestrictions().Fields.RequiresExactMatch("spec.nodeName")
		if !ok {
			return false, nil, nil
		}
		list := &corev1.PodList{}
		for _, o := range core {
			if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == node {
				list.Items = append(list.Items, *p)
			}
		}
		return true, list, nil
	})
	cs.PrependReactor("get", "namespaces", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "secret" {
			return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "secret", errors.New("no"))
		}
		return false, nil, nil
	})
	cl := fakeclient.NewClientBuilder().WithScheme(testutil.Scheme(t)).WithRuntimeObjects(vacate...).WithRuntimeObjects(core...).Build()
	return &session{clientset: cs, client: cl, where: "the fake cluster"}
}

// planFixture is a cluster with Kubernetes' objects (core) and vacate's:
//   - n1, cordoned by its drain (Evicting), under the DrainPolicy pool-a
//     (surge All, HTTP hooks, pods.annotationNamespaceSelector,
//     timeouts.evacuation and ForceDelete): Deployments' pods surged or
//     not, with or without a PDB, a StatefulSet's, a bare pod, a
//     DaemonSet's, pods with HTTP hooks answered, waiting, on a loopback
//     address and without an IP, pods annotated skip and wait-completed,
//     annotations ignored in namespace other; EvacuationProviders before
//     and after eviction, of one mode, being deleted; an Evacuation of
//     the drain, one left by an earlier drain, one released;
//   - n2, not Ready for an hour: a pod terminating for 30 minutes, a pod of
//     a namespace that is gone;
//   - n3, cordoned by someone else, with a pod of a namespace plan may not
//     read; n4, cordoned by hand with a record of no drain UID.
func planFixture() (core, vacate []runtime.Object) {
	core = append(planFixtureNodes(), planFixturePods()...)
	core = append(core,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps", Labels: map[string]string{"hooks": "yes", "annotations": "yes", "evp": "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"hooks": "yes"}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
			Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
			Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "hk"},
			Spec:   policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hk"}}},
			Status: policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 4, DesiredHealthy: 3, ExpectedPods: 4, DisruptionsAllowed: 1}})
	vacate = append(planFixtureWorkload("web-1", "web", 2, true), planFixtureWorkload("solo-1", "solo", 1, true)...)
	vacate = append(vacate, planFixtureWorkload("hk-1", "hk", 4, false)...)
	vacate = append(vacate, planFixtureVacate()...)
	return core, vacate
}

func planFixtureNodes() []runtime.Object {
	notReady := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(planT0.Add(-time.Hour))}}
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid-1", Labels: map[string]string{"pool": "a"},
			Annotations: map[string]string{v1alpha1.AnnotationCordonedBy: "n1/drain-uid-1"}},
			Spec:   corev1.NodeSpec{Unschedulable: true},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", UID: "node-uid-2", Labels: map[string]string{"pool": "a"}},
			Status: corev1.NodeStatus{Conditions: notReady}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3", UID: "node-uid-3", Labels: map[string]string{"pool": "b"}}, Spec: corev1.NodeSpec{Unschedulable: true}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n4", UID: "node-uid-4", Labels: map[string]string{"pool": "b"},
			Annotations: map[string]string{v1alpha1.AnnotationCordonedBy: "old"}}, Spec: corev1.NodeSpec{Unschedulable: true}},
	}
}

func planFixturePods() []runtime.Object {
	ctrl := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true)}}
	}
	pod := func(ns, name, node string, labels, ann map[string]string, owner []metav1.OwnerReference, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Labels: labels,
			Annotations: ann, OwnerReferences: owner},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	app := func(name string) map[string]string { return map[string]string{"app": name} }
	hooked := map[string]string{"vacate.dev/evacuate-port": "8080", "vacate.dev/evacuate-path": "/move"}
	skip, wait := map[string]string{"vacate.dev/drain": "skip"}, map[string]string{"vacate.dev/drain": "wait-completed"}
	stuck := pod("other", "stuck", "n2", nil, nil, ctrl("ReplicaSet", "lying-1"), "10.0.1.4")
	stuck.DeletionTimestamp, stuck.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(planT0.Add(-30*time.Minute))), ptr.To(int64(30))
	stuck.Finalizers = []string{"example.com/keep"}
	return []runtime.Object{
		pod("apps", "web-a", "n1", app("web"), nil, ctrl("ReplicaSet", "web-1"), "10.0.0.1"),
		pod("apps", "web-b", "n1", app("web"), nil, ctrl("ReplicaSet", "web-1"), "10.0.0.2"),
		pod("apps", "solo-a", "n1", app("solo"), nil, ctrl("ReplicaSet", "solo-1"), "10.0.0.3"),
		pod("apps", "db-0", "n1", app("db"), nil, ctrl("StatefulSet", "db"), "10.0.0.4"),
		pod("apps", "bare", "n1", nil, nil, nil, "10.0.0.5"),
		pod("apps", "agent-x", "n1", nil, nil, ctrl("DaemonSet", "agent"), "10.0.0.6"),
		pod("apps", "hook-done", "n1", app("hk"), hooked, ctrl("ReplicaSet", "hk-1"), "10.0.0.7"),
		pod("apps", "hook-wait", "n1", app("hk"), hooked, ctrl("ReplicaSet", "hk-1"), "10.0.0.8"),
		pod("apps", "hook-loop", "n1", app("hk"), hooked, ctrl("ReplicaSet", "hk-1"), "127.0.0.1"),
		pod("apps", "hook-noip", "n1", app("hk"), hooked, ctrl("ReplicaSet", "hk-1"), ""),
		pod("apps", "kept", "n1", nil, skip, ctrl("ReplicaSet", "kept-1"), "10.0.0.9"),
		pod("apps", "waits", "n1", nil, wait, ctrl("ReplicaSet", "kept-1"), "10.0.0.10"),
		pod("other", "lying", "n1", nil, skip, ctrl("ReplicaSet", "lying-1"), "10.0.1.1"),
		pod("other", "hooked-other", "n1", nil, hooked, ctrl("ReplicaSet", "lying-1"), "10.0.1.2"),
		pod("other", "gone-ns", "n2", nil, nil, ctrl("ReplicaSet", "lying-1"), "10.0.1.3"),
		pod("ghost", "orphan", "n2", nil, hooked, ctrl("ReplicaSet", "q-1"), "10.0.2.3"),
		pod("secret", "quiet", "n3", nil, skip, ctrl("ReplicaSet", "q-1"), "10.0.2.1"),
		stuck,
	}
}

// planFixtureWorkload is a ReplicaSet of a Deployment, of ready pods, that
// selects its pods by pod-template-hash (a surge can keep a replacement
// apart) or not.
func planFixtureWorkload(rsName, dep string, ready int32, byHash bool) []runtime.Object {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: rsName, UID: types.UID("uid-" + rsName),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep, UID: types.UID("uid-" + dep), Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(ready), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	if byHash {
		rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pod-template-hash": "h" + rsName}}
		rs.Spec.Template.Labels = map[string]string{"pod-template-hash": "h" + rsName}
	}
	return []runtime.Object{rs, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: dep, UID: types.UID("uid-" + dep)},
		Spec:   appsv1.DeploymentSpec{Replicas: ptr.To(ready), Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready, Replicas: ready}}}
}

// planFixtureVacate are vacate's objects of planFixture.
func planFixtureVacate() []runtime.Object {
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(planT0.Add(-d)) }
	inApps := &metav1.LabelSelector{MatchLabels: map[string]string{"evp": "yes"}}
	provider := func(name, app string, stage v1alpha1.EvacuationStage, modes ...v1alpha1.DrainMode) *v1alpha1.EvacuationProvider {
		return &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.EvacuationProviderSpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, NamespaceSelector: inApps, Stage: stage, Modes: modes,
			Timeout: &metav1.Duration{Duration: 45 * time.Second}}}
	}
	deleting := provider("deleting", "db", "")
	deleting.DeletionTimestamp, deleting.Finalizers = ptr.To(ago(time.Minute)), []string{"example.com/keep"}
	evacuation := func(provider, drainUID string, phase v1alpha1.EvacuationPhase, pods ...string) *v1alpha1.Evacuation {
		ev := &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.EvacuationName("n1", provider), Generation: 1, CreationTimestamp: ago(10 * time.Minute)},
			Spec: v1alpha1.EvacuationSpec{NodeName: "n1", Provider: provider, Mode: v1alpha1.ModeMaintenance, Desired: v1alpha1.DesiredEvacuate,
				DrainUID: drainUID, NodeUID: "node-uid-1", Stage: v1alpha1.StageBeforeEviction},
			Status: v1alpha1.EvacuationStatus{Phase: phase, Message: "working", ObservedGeneration: 1, HeartbeatTime: ptr.To(ago(10 * time.Second))}}
		for _, p := range pods {
			ev.Spec.ProtectedPods = append(ev.Spec.ProtectedPods, v1alpha1.ProtectedPod{Namespace: "apps", Name: p, UID: "uid-apps-" + p})
		}
		return ev
	}
	released := evacuation("hk-prov", "drain-uid-1", v1alpha1.EvacuationInProgress, "hook-done", "hook-wait")
	released.Spec.Release = &v1alpha1.EvacuationRelease{By: "bob", Time: ago(time.Minute)}
	return []runtime.Object{
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.DrainPolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Pods:         v1alpha1.PodPolicy{AnnotationNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"annotations": "yes"}}},
			HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"hooks": "yes"}}},
			Surge:        v1alpha1.Surge{Pods: v1alpha1.SurgeAll},
			Timeouts: v1alpha1.Timeouts{Evacuation: &metav1.Duration{Duration: 15 * time.Minute}, OnTimeout: "ForceDelete",
				UnreachablePods: &metav1.Duration{Duration: 5 * time.Minute}},
		}},
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: v1alpha1.DrainPolicySpec{
			Timeouts: v1alpha1.Timeouts{Drain: &metav1.Duration{Duration: time.Hour}}}},
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "drain-uid-1"},
			Spec: v1alpha1.NodeDrainSpec{NodeName: "n1", Requesters: []v1alpha1.Requester{{Name: "alice"}}},
			Status: v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseEvicting, NodeUID: "node-uid-1", Hooks: []v1alpha1.HookStatus{
				{Name: "pod/apps/hook-done", Phase: string(v1alpha1.EvacuationCompleted), Message: "moved", CallerVerified: ptr.To(true)},
				{Name: "pod/apps/hook-wait", Phase: string(v1alpha1.EvacuationInProgress), Message: "copying", CallerVerified: ptr.To(false)},
			}}},
		provider("before-db", "db", ""), provider("after-web", "web", v1alpha1.StageAfterEviction),
		provider("decom", "nothing", "", v1alpha1.ModeDecommission), provider("maint", "solo", "", v1alpha1.ModeMaintenance),
		provider("hk-prov", "hk", ""), deleting,
		evacuation("before-db", "drain-uid-1", v1alpha1.EvacuationInProgress, "db-0"),
		evacuation("maint", "drain-uid-old", v1alpha1.EvacuationCompleted, "solo-a"),
		released,
	}
}
