package operator_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/drain"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/operator"
)

// TestPlannerDecidesTheSameOnSlimPods: the pods of a node, as diverse as a
// drain meets them (Deployment pods behind a PDB that allows a disruption
// and one that allows none, a DaemonSet pod, a mirror pod, a finished Job
// pod, an emptyDir pod, a pod with a persistent volume claim, a bare pod,
// pods with vacate's annotations, a terminating pod, with an HTTP hook, on the host network,
// one of vacate's own), read from the API server: the planner, the HTTP
// hook's target and the eviction request come out the same for the pods
// and for what the cache keeps of them (operator.SlimPod), under several policies.
// A field slimPod drops that one of them reads fails this test.
func TestPlannerDecidesTheSameOnSlimPods(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cs := c.Client
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "slim", Count: 1, Labels: map[string]string{"pool": "slim"}})[0]
	ns := testenv.Namespace(t, c)

	createSlimWorkloads(t, ctx, cs, ns, node)
	createSlimOwnedPods(t, ctx, cs, ns, node)
	pods := waitNodePods(t, c, ns, node, slimPodsReady)
	leaving := catchLeaving(t, ctx, cs, ns)
	pods = append(slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Name == "leaving" }), *leaving)
	pdbs := slimPDBs(t, ctx, cs, ns)
	full := make([]*corev1.Pod, 0, len(pods))
	slim := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		full = append(full, &pods[i])
		slim = append(slim, operator.SlimPod(pods[i].DeepCopy()))
	}
	checkPlansAgree(t, full, slim, pdbs)
	checkHooksAndEvictionsAgree(t, node, full, slim)
}

// mustCreate creates what f creates, or fails the test naming what.
func mustCreate(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatalf("creating %s: %v", what, err)
	}
}

// createSlimWorkloads creates on node the workloads' pods: Deployments
// behind a PDB that allows a disruption (web) and one that allows none
// (tight), one with an emptyDir (cache), a DaemonSet and a Job.
func createSlimWorkloads(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, node string) {
	t.Helper()
	onNode := map[string]string{devcluster.HostnameLabel: node}
	for _, d := range []struct {
		name, maxUnavailable string
		emptyDir             bool
	}{{name: "web", maxUnavailable: "1"}, {name: "tight", maxUnavailable: "0"}, {name: "cache", emptyDir: true}} {
		dep := devcluster.Deployment(ns, d.name, 2)
		dep.Spec.Template.Spec.NodeSelector = onNode
		if d.emptyDir {
			dep.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
		mustCreate(t, "Deployment "+d.name, func() error {
			_, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
			return err
		})
		if d.maxUnavailable != "" {
			mustCreate(t, "PDB "+d.name, func() error {
				_, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, d.name, d.name, "", d.maxUnavailable), metav1.CreateOptions{})
				return err
			})
		}
	}
	ds := devcluster.DaemonSet(ns, "agent")
	ds.Spec.Template.Spec.NodeSelector = onNode
	mustCreate(t, "DaemonSet", func() error { _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); return err })
	job := devcluster.Job(ns, "report", 1)
	job.Spec.Template.Spec.NodeSelector = onNode
	mustCreate(t, "Job", func() error { _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); return err })

}

// createSlimOwnedPods creates on node the pods vacate's rules tell apart:
// bare, mirror, with a claim and a hostPath, with vacate's annotations and
// labels, with HTTP hooks (one on the host network), and "leaving", which a
// finalizer keeps terminating once deleted (until the test's cleanup).
func createSlimOwnedPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, node string) {
	t.Helper()
	// Pods created directly: a ConfigMap is their controller, so they count
	// as managed and the garbage collector keeps them.
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := func(name string, change func(*corev1.Pod)) *corev1.Pod {
		p := devcluster.BarePod(ns, name, node)
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		change(p)
		return p
	}
	for _, p := range []*corev1.Pod{
		devcluster.BarePod(ns, "bare", node),
		owned("mirror", func(p *corev1.Pod) {
			p.OwnerReferences = nil
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
		}),
		owned("claim", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-local"}}},
				{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/data"}}}}
		}),
		owned("skip", func(p *corev1.Pod) { p.Annotations = map[string]string{drain.PodAnnotation: drain.AnnotationSkip} }),
		owned("wait", func(p *corev1.Pod) {
			p.Annotations = map[string]string{drain.PodAnnotation: drain.AnnotationWaitCompleted}
		}),
		owned("skip-selected", func(p *corev1.Pod) { p.Labels["skip-me"] = "yes" }),
		owned("own", func(p *corev1.Pod) { p.Labels[drain.ComponentLabel] = drain.ComponentValue }),
		owned("hook", func(p *corev1.Pod) {
			p.Annotations = map[string]string{hook.AnnotationPort: "8080", hook.AnnotationPath: "/evacuate", "prometheus.io/scrape": "true"}
		}),
		owned("leaving", func(p *corev1.Pod) { p.Finalizers = []string{testHold} }),
		owned("hook-hostnet", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Annotations = map[string]string{hook.AnnotationPort: "8080"}
		}),
	} {
		mustCreate(t, "pod "+p.Name, func() error { _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); return err })
	}

	t.Cleanup(func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, _ = cs.CoreV1().Pods(ns).Patch(context.Background(), "leaving", types.MergePatchType, patch, metav1.PatchOptions{})
	})
}

// slimPodsReady says whether the node's pods are all up: the Deployments',
// the DaemonSet's and the owned pods running with an IP, the Job's done.
func slimPodsReady(pods []corev1.Pod) bool {
	running, succeeded := 0, 0
	for _, p := range pods {
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded++
		case p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "":
			running++
		}
	}
	return running == 6+1+10 && succeeded == 1 // Deployments, DaemonSet, own pods; the Job's
}

// catchLeaving deletes pod "leaving", which a finalizer holds, and returns
// it as a watch sees it terminating.
func catchLeaving(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) *corev1.Pod {
	t.Helper()
	// kwok removes the finalizers of a deleted pod on its nodes (its
	// pod-delete stage) within milliseconds, so "leaving" is terminating only
	// for a moment: a watch catches that moment, and the test compares the
	// pod as it was then.
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=leaving"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var leaving *corev1.Pod
	for leaving == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of pod leaving ended before it was seen terminating")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && p.DeletionTimestamp != nil {
				leaving = p
			}
		case <-time.After(time.Minute):
			t.Fatal("pod leaving was never seen terminating")
		}
	}
	w.Stop()
	return leaving
}

// slimPDBs waits for the PDBs web and tight to see their two pods each and
// returns the namespace's PDBs.
func slimPDBs(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) []*policyv1.PodDisruptionBudget {
	t.Helper()
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "web", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, cs, ns, "tight", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	pdbList, err := cs.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdbs := make([]*policyv1.PodDisruptionBudget, 0, len(pdbList.Items))
	for i := range pdbList.Items {
		pdbs = append(pdbs, &pdbList.Items[i])
	}
	return pdbs
}

// checkPlansAgree checks that the planner decides the same on the full and
// the slim pods under several policies, and that under the defaults the
// pods meet every rule the test is meant to cover.
func checkPlansAgree(t *testing.T, full, slim []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) {
	t.Helper()
	notReady := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}}}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		rules drain.Rules
	}{
		{name: "defaults", rules: drain.Rules{UnreachablePods: 5 * time.Minute}},
		{name: "evict everything", rules: drain.Rules{EvictDaemonSets: true, DeleteUnmanaged: true, EvictLocalStorage: true,
			SkipSelector: labels.SelectorFromSet(labels.Set{"skip-me": "yes"})}},
		{name: "node not ready", rules: drain.Rules{UnreachablePods: time.Minute}.ForNode(notReady)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := drain.New(full, drain.GuardsOf(pdbs...), tc.rules, now), drain.New(slim, drain.GuardsOf(pdbs...), tc.rules, now)
			if w, g := describePlan(want), describePlan(got); !slices.Equal(w, g) {
				t.Errorf("the planner decides differently on slim pods:\nfrom the API server:\n%s\nfrom the cache:\n%s", lines(w), lines(g))
			}
			if want.ConditionMessage() != got.ConditionMessage() || !want.Recheck.Equal(got.Recheck) {
				t.Errorf("plan summary %q (recheck %s) on slim pods, %q (recheck %s) on the API server's", got.ConditionMessage(), got.Recheck, want.ConditionMessage(), want.Recheck)
			}
			if tc.name == "defaults" {
				t.Logf("plan: %s", want.ConditionMessage())
				reasons := map[drain.Reason]bool{}
				for _, d := range want.Decisions {
					reasons[d.Reason] = true
				}
				for _, r := range []drain.Reason{drain.ReasonMirrorPod, drain.ReasonCompleted, drain.ReasonSkipAnnotation, drain.ReasonWaitCompletion,
					drain.ReasonDaemonSet, drain.ReasonUnmanaged, drain.ReasonLocalStorage, drain.ReasonEvictable, drain.ReasonVacateLast} {
					if !reasons[r] {
						t.Errorf("no pod was decided %s: the test does not cover that rule", r)
					}
				}
			}
		})
	}

}

// checkHooksAndEvictionsAgree checks that the HTTP hook's target and the
// eviction request are the same for each full pod and its slim copy.
func checkHooksAndEvictionsAgree(t *testing.T, node string, full, slim []*corev1.Pod) {
	t.Helper()
	run := hook.Run{Drain: "uid", Node: node, Mode: "Maintenance"}
	for i := range full {
		if hook.Wants(full[i]) != hook.Wants(slim[i]) {
			t.Errorf("pod %s: hook.Wants differs on the slim pod", full[i].Name)
		}
		wt, werr := hook.TargetFor(full[i], run, true)
		gt, gerr := hook.TargetFor(slim[i], run, true)
		if hook.Wants(full[i]) && (!reflect.DeepEqual(wt, gt) || fmt.Sprint(werr) != fmt.Sprint(gerr)) {
			t.Errorf("pod %s: hook target %+v (%v) on the slim pod, %+v (%v) on the API server's", full[i].Name, gt, gerr, wt, werr)
		}
		if w, g := eviction.PodRequest(full[i], nil, 1), eviction.PodRequest(slim[i], nil, 1); !reflect.DeepEqual(w, g) {
			t.Errorf("pod %s: eviction request %+v on the slim pod, %+v on the API server's", full[i].Name, g, w)
		}
	}
}

// testHold is the finalizer that keeps pod "leaving" terminating.
const testHold = "vacate.dev/test-hold"

// describePlan is every decision of the plan as a line.
func describePlan(p drain.Plan) []string {
	out := make([]string, 0, len(p.Decisions))
	for _, d := range p.Decisions {
		out = append(out, fmt.Sprintf("%s: %s %s %q pdbs=%v blocked=%v by=%v", d.Key(), d.Action, d.Reason, d.Detail, d.PDBs, d.PDBBlocked, d.BlockingPDBs))
	}
	return out
}

func lines(ss []string) string {
	out := ""
	for _, s := range ss {
		out += "  " + s + "\n"
	}
	return out
}

// waitNodePods polls the namespace's pods on the node until cond holds.
func waitNodePods(t *testing.T, c *devcluster.Cluster, ns, node string, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pods []corev1.Pod
	testutil.Eventually(t, 3*time.Minute, "the pods on "+node+" to get ready", func() error {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil {
			pods = list.Items
			if cond(pods) {
				return nil
			}
		}
		var states []string
		for _, p := range pods {
			states = append(states, fmt.Sprintf("%s %s ip=%q", p.Name, p.Status.Phase, p.Status.PodIP))
		}
		return fmt.Errorf("%v", states)
	})
	return pods
}
