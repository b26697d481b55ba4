package nodedrain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestUnreachableNodeTerminatingPods: a Deployment's pod runs on a node
// whose kubelet then stops posting status (its Ready condition turns
// Unknown). The drain evicts the pod, which stays Terminating for good
// since no kubelet confirms it stopped. While timeouts.unreachablePods has
// not passed the drain waits for it; once it has, the pod no longer counts
// as remaining, the drain reaches Drained and the pod is reported, in the
// status and in `vacate plan`.
//
// kwok cannot simulate a kubelet that goes away (it keeps running a node
// whose annotation is removed), so the node here has no kubelet at all: the
// test does what kubelet and scheduler would, writing the node's status,
// binding the pod and marking it Running.
func TestUnreachableNodeTerminatingPods(t *testing.T) {
	e := startEnv(t)
	ctx := testenv.Context(t)
	cs := e.c.Client
	target := kubeletlessNode(t, e, "unreach-0")
	ns := testenv.Namespace(t, e.c)

	t.Log("running web (1 replica) on the target; no scheduler places its pods, the test binds the first one")
	web := devcluster.Deployment(ns, "web", 1)
	web.Spec.Template.Spec.SchedulerName = "none" // replacements stay unscheduled
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := runOn(t, e, ns, "web", target)

	t.Log("the node's kubelet stops posting status: its Ready condition turns Unknown")
	nodeUnreachable(t, e, target)

	t.Log("draining it under a policy that waits an hour for terminating pods on an unreachable node")
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "unreachable-test"}}
	dp.Spec.Timeouts.UnreachablePods = &metav1.Duration{Duration: time.Hour}
	if err := e.cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), dp) })
	nd := testutil.NodeDrain(target, dp.Name, "cli:test")
	if err := e.cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cl.Delete(context.Background(), nd) })

	waitPods(t, e, ns, "the web pod to be evicted and stay Terminating", func(pods []corev1.Pod) bool {
		return terminating(pods, pod.UID)
	})
	waiting := e.waitDrain(t, target, "waiting for the Terminating pod", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		c := meta.FindStatusCondition(nd.Status.Conditions, v1alpha1.ConditionPodsEvicted)
		return c != nil && c.Message == "1 to wait"
	})
	t.Logf("status before the timeout: %s", testenv.DescribeDrain(waiting))
	if waiting.Status.Phase == v1alpha1.PhaseDrained || waiting.Status.Remaining != 1 {
		t.Errorf("before timeouts.unreachablePods the drain must wait for the pod: %s", testenv.DescribeDrain(waiting))
	}
	if d, _ := planPod(t, e, target, pod.Namespace+"/"+pod.Name); d.Action != "Wait" || d.Reason != "Terminating" ||
		!strings.Contains(d.Detail, "the node is not Ready: waited on until") {
		t.Errorf("vacate plan before the timeout: %+v, want Wait/Terminating saying until when it is waited on", d)
	}

	t.Log("shortening timeouts.unreachablePods to 5s: the pod is no longer waited on")
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(dp), dp); err != nil {
			return err
		}
		dp.Spec.Timeouts.UnreachablePods = &metav1.Duration{Duration: 5 * time.Second}
		return e.cl.Update(ctx, dp)
	}); err != nil {
		t.Fatal(err)
	}
	done := e.waitDrain(t, target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	t.Logf("status when drained: %s", testenv.DescribeDrain(done))
	want := "no pods left to move; not waited on: " + pod.Namespace + "/" + pod.Name + " (UnreachableTerminating)"
	if c := meta.FindStatusCondition(done.Status.Conditions, v1alpha1.ConditionPodsEvicted); c == nil || c.Status != metav1.ConditionTrue || c.Message != want {
		t.Errorf("PodsEvicted condition = %+v, want True with message %q", c, want)
	}
	if done.Status.Remaining != 0 {
		t.Errorf("remaining = %d, want 0", done.Status.Remaining)
	}
	d, unreachable := planPod(t, e, target, pod.Namespace+"/"+pod.Name)
	if d.Action != "Skip" || d.Reason != "UnreachableTerminating" || !strings.Contains(d.Detail, "its kubelet cannot confirm the pod stopped") {
		t.Errorf("vacate plan after the timeout: %+v, want Skip/UnreachableTerminating saying the kubelet cannot confirm it stopped", d)
	}
	if len(unreachable) != 1 || unreachable[0] != pod.Namespace+"/"+pod.Name {
		t.Errorf("vacate plan lists %v as not waited on, want only %s", unreachable, pod.Name)
	}

	// The scenario held: the pod is still there, Terminating, on a node
	// that is still not Ready.
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !terminating(list.Items, pod.UID) {
		t.Errorf("pod %s is no longer Terminating: the node's kubelet was not gone", pod.Name)
	}
	if node := getNode(t, e, target); nodeReady(node) {
		t.Errorf("node %s became Ready again during the test", target)
	}
}

// kubeletlessNode creates a node that nothing runs (kwok leaves it alone),
// deleted when the test ends, and reports it Ready as a kubelet would.
func kubeletlessNode(t *testing.T, e *env, name string) string {
	t.Helper()
	n := devcluster.SimulatedNode(name, "zone-a", 0)
	delete(n.Annotations, devcluster.KwokNodeAnnotation)
	if _, err := e.c.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// No kubelet ever confirms its pods gone: they would stay
		// Terminating, bound to this name, into the next run of the test
		// (-count). Force them out, as a person does for a dead node.
		ctx, pods := context.Background(), e.c.Client.CoreV1().Pods("")
		if list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name}); err == nil {
			for _, p := range list.Items {
				_ = e.c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
		_ = e.c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	setNodeReady(t, e, name, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
	return name
}

// runOn binds the Deployment's unscheduled pod to node and reports it
// Running and Ready, as the scheduler and the node's kubelet would.
func runOn(t *testing.T, e *env, ns, app, node string) corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	waitPods(t, e, ns, "the pod of "+app+" to be created", func(pods []corev1.Pod) bool {
		for _, p := range pods {
			if p.Labels[devcluster.AppLabel] == app {
				pod = p
				return true
			}
		}
		return false
	})
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name, UID: pod.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := e.c.Client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		updated, err := e.c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			pod = *updated
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// nodeUnreachable marks the node's Ready condition Unknown, as the node
// lifecycle controller does when a kubelet stops posting status.
func nodeUnreachable(t *testing.T, e *env, name string) {
	t.Helper()
	setNodeReady(t, e, name, corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.")
}

// setNodeReady writes the node's Ready condition through the status
// subresource, its transition time now.
func setNodeReady(t *testing.T, e *env, name string, status corev1.ConditionStatus, reason, msg string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
		kept := []corev1.NodeCondition{cond}
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady {
				kept = append(kept, c)
			}
		}
		n.Status.Conditions = kept
		_, err = e.c.Client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// terminating reports whether the pod with this UID is among pods, deleted
// but not gone.
func terminating(pods []corev1.Pod, uid types.UID) bool {
	for _, p := range pods {
		if p.UID == uid && p.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// plannedPod is one pod of `vacate plan -o json`.
type plannedPod struct {
	Pod    string `json:"pod"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// planPod runs `vacate plan NODE -o json` and returns its decision for
// pod, and the pods it says are not waited on.
func planPod(t *testing.T, e *env, node, pod string) (plannedPod, []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(testenv.Context(t), []string{"plan", node, "-o", "json", "--kubeconfig", e.c.Kubeconfig},
		cli.Streams{In: io.MultiReader(), Out: &out, Err: &errOut}, clock.RealClock{})
	if code != 0 {
		t.Fatalf("vacate plan %s: exit %d: %s", node, code, errOut.String())
	}
	var plans []struct {
		Pods        []plannedPod `json:"pods"`
		Unreachable []string     `json:"unreachable"`
	}
	if err := json.Unmarshal(out.Bytes(), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("vacate plan %s -o json: %v\n%s", node, err, out.String())
	}
	for _, p := range plans[0].Pods {
		if p.Pod == pod {
			return p, plans[0].Unreachable
		}
	}
	t.Fatalf("vacate plan %s does not list pod %s:\n%s", node, pod, out.String())
	return plannedPod{}, nil
}
