package nodedrain_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/nodedrain"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/hook"
)

// annotatedApp runs a one-replica Deployment on node whose pod carries
// annotations, and returns its ready pod.
func annotatedApp(t *testing.T, e *env, ns, name, node string, annotations map[string]string) corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	d := devcluster.Deployment(ns, name, 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	d.Spec.Template.Annotations = annotations
	if _, err := e.c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, err := devcluster.WaitForPodsReady(ctx, e.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ready[0]
}

// podEvents lists the events of a reason about a pod.
func podEvents(t *testing.T, e *env, ns, pod, reason string) []corev1.Event {
	t.Helper()
	list, err := e.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestAnnotationsOnlyWhereThePolicyAllows: a DrainPolicy's
// pods.annotationNamespaceSelector says where pods may hold a drain with
// their own annotations. In a namespace it selects, a pod annotated
// vacate.dev/drain: skip stays and a pod's HTTP hook is called; in one it
// does not select, both annotations are ignored: the pods are evicted like
// any other, the hook is never called, and each pod gets one Warning event
// saying why.
func TestAnnotationsOnlyWhereThePolicyAllows(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, e.c, devcluster.NodeSet{Prefix: "annot", Count: 1, Labels: map[string]string{"pool": "annot"}})
	node := nodes[0]
	const trustLabel = "vacate.dev/test-trusted"
	trusted, untrusted := testenv.Namespace(t, e.c), testenv.Namespace(t, e.c)
	nsObj, err := e.c.Client.CoreV1().Namespaces().Get(ctx, trusted, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[trustLabel] = "true"
	if _, err := e.c.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(t, e, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "annot"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "annot"}},
		Pods:         v1alpha1.PodPolicy{AnnotationNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{trustLabel: "true"}}},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}})

	skip := map[string]string{drain.PodAnnotation: drain.AnnotationSkip}
	const port = 18090
	hooked := map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
	keptPod := annotatedApp(t, e, trusted, "kept", node, skip)
	lyingPod := annotatedApp(t, e, untrusted, "lying", node, skip)
	trustedHook := annotatedApp(t, e, trusted, "broker", node, hooked)
	untrustedHook := annotatedApp(t, e, untrusted, "intruder", node, hooked)
	// The trusted broker's evacuation finishes at once; the intruder's would
	// hold the drain forever if its annotation were honoured.
	brokerApp := &hookApp{answer: answer(200, `{"state":"Completed","message":"moved"}`)}
	intruderApp := &hookApp{answer: answer(200, `{"state":"InProgress","message":"holding your drain","remaining":1}`)}
	serveHook(t, &trustedHook, port, brokerApp)
	serveHook(t, &untrustedHook, port, intruderApp)

	requestAll(t, e, nodes)
	e.waitDrain(t, node, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool { return nd.Status.Phase == v1alpha1.PhaseDrained })

	left := podsOn(t, e, trusted, node)
	if !hasApp(left, "kept") {
		t.Errorf("the pod annotated %s=%s in a namespace the policy selects was evicted", drain.PodAnnotation, drain.AnnotationSkip)
	}
	for _, p := range []corev1.Pod{lyingPod, untrustedHook} {
		if got, err := e.c.Client.CoreV1().Pods(untrusted).Get(ctx, p.Name, metav1.GetOptions{}); err == nil && got.UID == p.UID && got.DeletionTimestamp == nil {
			t.Errorf("pod %s/%s in a namespace the policy does not select held the drain with its annotations: it is still there", untrusted, p.Name)
		}
	}
	brokerApp.mu.Lock()
	if len(brokerApp.posts) == 0 {
		t.Error("the HTTP hook of the pod in a namespace the policy selects was never called")
	}
	brokerApp.mu.Unlock()
	intruderApp.mu.Lock()
	if len(intruderApp.posts) > 0 {
		t.Errorf("the HTTP hook of a pod in a namespace the policy does not select was called: %v", intruderApp.posts)
	}
	intruderApp.mu.Unlock()

	for _, p := range []corev1.Pod{lyingPod, untrustedHook} {
		var events []corev1.Event
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			events = podEvents(t, e, untrusted, p.Name, nodedrain.EventAnnotationIgnored)
			return len(events) > 0, nil
		})
		if err != nil {
			t.Errorf("no %s event on pod %s/%s", nodedrain.EventAnnotationIgnored, untrusted, p.Name)
			continue
		}
		ev := events[0]
		if len(events) != 1 || ev.Count > 1 || (ev.Series != nil && ev.Series.Count > 1) {
			t.Errorf("pod %s/%s: want one %s event for the drain, got %d (count %d, series %+v)", untrusted, p.Name, nodedrain.EventAnnotationIgnored, len(events), ev.Count, ev.Series)
		}
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "annotationNamespaceSelector") || !strings.Contains(ev.Message, "annot") {
			t.Errorf("event on pod %s/%s: %s %q; want a Warning naming the policy and its pods.annotationNamespaceSelector", untrusted, p.Name, ev.Type, ev.Message)
		}
		t.Logf("event on %s/%s: %s", untrusted, p.Name, ev.Message)
	}
	for _, p := range []corev1.Pod{keptPod, trustedHook} {
		if events := podEvents(t, e, trusted, p.Name, nodedrain.EventAnnotationIgnored); len(events) > 0 {
			t.Errorf("pod %s/%s in a namespace the policy selects got %s: %s", trusted, p.Name, nodedrain.EventAnnotationIgnored, events[0].Message)
		}
	}
}
