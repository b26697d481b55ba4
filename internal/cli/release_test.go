package cli

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// podWatch watches one pod from the start of a test to its end and records
// whether it was evicted (deleted, or marked for deletion) before allowed
// was set.
type podWatch struct {
	allowed atomic.Bool
	mu      sync.Mutex
	early   []string // what was seen before allowed
	gone    bool
}

func watchPod(t *testing.T, c *devcluster.Cluster, pod *corev1.Pod) *podWatch {
	t.Helper()
	ctx := testenv.Context(t)
	w, err := c.Client.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	pw := &podWatch{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.UID != pod.UID || (ev.Type != watch.Deleted && p.DeletionTimestamp == nil) {
				continue
			}
			pw.mu.Lock()
			pw.gone = true
			if !pw.allowed.Load() {
				pw.early = append(pw.early, fmt.Sprintf("%s (deletionTimestamp %v)", ev.Type, p.DeletionTimestamp))
			}
			pw.mu.Unlock()
		}
	}()
	t.Cleanup(w.Stop)
	return pw
}

func (pw *podWatch) check(t *testing.T, what string) {
	t.Helper()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if len(pw.early) > 0 {
		t.Fatalf("the protected pod was evicted %s: %v", what, pw.early)
	}
}

// releaseScene runs the controller and, on two fresh nodes, a one-pod
// Deployment pinned to the first that an EvacuationProvider protects. No
// provider process runs, so the evacuation never finishes. It returns the
// node, the other node (never drained), the pod and the provider's name.
func releaseScene(t *testing.T) (*devcluster.Cluster, client.Client, string, string, *corev1.Pod, string) {
	t.Helper()
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-release", Count: 2})
	ns := testenv.Namespace(t, c)
	d := devcluster.Deployment(ns, "relstore", 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: nodes[0]}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.Everything(), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const provider = "rel-store"
	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: provider}, Spec: v1alpha1.EvacuationProviderSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "relstore"}},
		Stage:       v1alpha1.StageBeforeEviction,
		Timeout:     &metav1.Duration{Duration: 2 * time.Second},
	}}
	if err := cl.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), p) })
	return c, cl, nodes[0], nodes[1], &pods[0], provider
}

// TestReleaseEvacuationOfDeletedProvider: a provider deleted while its
// evacuation is unfinished keeps its pod on the node, and explain says
// why and names both ways out. 'vacate release' under the ClusterRole
// vacate-user refuses what it cannot release (an unknown node or
// provider, a node without a drain, no terminal and no --yes, a "no" at
// the prompt), writes nothing with --dry-run, and otherwise records who
// released it and why: the pod is then evicted, and never before; the
// drain reaches Drained, status.hooks shows Released with the user and
// reason, an EvacuationReleased event is recorded, and a second release
// is refused naming the first.
func TestReleaseEvacuationOfDeletedProvider(t *testing.T) {
	c, cl, node, idle, pod, provider := releaseScene(t)
	ctx := testenv.Context(t)
	pw := watchPod(t, c, pod)
	rt := releaseCase{node: node, provider: provider, evName: v1alpha1.EvacuationName(node, provider), podKey: pod.Namespace + "/" + pod.Name}
	evName, podKey := rt.evName, rt.podKey

	nd := testutil.NodeDrain(node, "", "test:release")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nd) })
	held := func(detail string) func(*v1alpha1.NodeDrain) bool {
		return func(nd *v1alpha1.NodeDrain) bool {
			return slices.ContainsFunc(nd.Status.Blockers, func(b v1alpha1.Blocker) bool {
				return b.Pod == podKey && b.Reason == v1alpha1.BlockerEvacuation && b.Holder == "Evacuation "+evName &&
					strings.HasPrefix(b.Detail, detail)
			})
		}
	}
	describe := func(nd *v1alpha1.NodeDrain) string { return fmt.Sprintf("%+v", nd.Status) }
	testenv.WaitForDrain(t, cl, node, "holding the pod for the provider", time.Minute, held("waiting for provider "+provider), describe)

	t.Log("the provider is deleted: its finalizer keeps it while the evacuation is unfinished, and the pod stays")
	if err := cl.Delete(ctx, &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: provider}}); err != nil {
		t.Fatal(err)
	}
	deletedMsg := fmt.Sprintf("provider %s deleted while evacuating 1 pod(s) on node %s", provider, node)
	testenv.WaitForDrain(t, cl, node, "saying the provider was deleted", 30*time.Second, held(deletedMsg), describe)
	pw.check(t, "after its provider was deleted")

	rt.checkExplainNamesBothWaysOut(t, user{t: t, kubeconfig: c.Kubeconfig})

	bindUserRole(t, c, "rita")
	rita := newUser(t, c, "rita")
	t.Log("what release refuses")
	rt.checkRefusals(t, rita, idle)
	t.Log("--dry-run shows everything and writes nothing")
	rt.checkDryRuns(t, rita)

	t.Log("on a terminal, release asks; 'n' releases nothing")
	code, out, errOut := releaseOnTerminal(t, rita, "n\n", "release", node, "--provider", provider, "--reason", "CHG-9")
	oneError(t, code, errOut, ExitError, "not released")
	if !strings.Contains(out, "Release Evacuation "+evName+"?") {
		t.Errorf("release on a terminal did not ask:\n%s", out)
	}
	ev := &v1alpha1.Evacuation{}
	if err := cl.Get(ctx, types.NamespacedName{Name: evName}, ev); err != nil {
		t.Fatal(err)
	}
	if ev.Spec.Release != nil {
		t.Fatalf("spec.release was written by a dry run or a refused release: %+v", ev.Spec.Release)
	}
	time.Sleep(time.Second) // let a wrongful eviction, if any, show in the watch
	pw.check(t, "before anyone released it")

	t.Log("rita answers 'y': the release is recorded and the drain shows it")
	pw.allowed.Store(true)
	code, out, errOut = releaseOnTerminal(t, rita, "y\n", "release", node, "--provider", provider, "--reason", "CHG-9 volume lost")
	if code != ExitOK {
		t.Fatalf("release exited %d: %s\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"evacuation/" + evName + " released by rita: CHG-9 volume lost",
		"nodedrain/" + node + ": " + evName + " Released: released by rita at ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("release output lacks %q", want)
		}
	}
	if err := cl.Get(ctx, types.NamespacedName{Name: evName}, ev); err != nil {
		t.Fatal(err)
	}
	if r := ev.Spec.Release; r == nil || r.By != "rita" || r.Reason != "CHG-9 volume lost" || r.Time.IsZero() {
		t.Errorf("spec.release = %+v, want by rita, reason CHG-9 volume lost, a time", r)
	}

	rt.checkReleasedAndDrained(t, c, cl, pod, pw)

	out = rita.must(ExitOK, "explain", node)
	if !strings.Contains(out, "released by rita at ") || !strings.Contains(out, "CHG-9 volume lost") {
		t.Errorf("explain does not say who released the evacuation and why:\n%s", out)
	}
	code, _, errOut = rita.vacate("release", node, "--provider", provider, "--yes")
	oneError(t, code, errOut, ExitError, "already released by rita at ", "CHG-9 volume lost")
}

// releaseCase is the evacuation TestReleaseEvacuationOfDeletedProvider
// releases: that of provider on node, named evName, which protects the pod
// podKey.
type releaseCase struct {
	node, provider, evName, podKey string
}

// checkExplainNamesBothWaysOut: explain of the held pod says the provider is
// being deleted or gone, and names both ways out (re-create it, or release).
func (rt releaseCase) checkExplainNamesBothWaysOut(t *testing.T, u user) {
	t.Helper()
	out := u.must(ExitOK, "explain", rt.node)
	for _, want := range []string{
		"EvacuationProvider " + rt.provider + " is being deleted or is gone",
		"may not have moved",
		"re-create the EvacuationProvider " + rt.provider,
		"vacate release " + rt.node + " --provider " + rt.provider + " --reason",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain of the held pod lacks %q", want)
		}
	}
}

// checkRefusals: what release refuses, in one line each: an unknown node,
// a node without a drain (idle), an unknown provider, no --provider, and
// no terminal without --yes (showing the pod it would let go).
func (rt releaseCase) checkRefusals(t *testing.T, u user, idle string) {
	t.Helper()
	node, provider := rt.node, rt.provider
	code, _, errOut := u.vacate("release", "nope", "--provider", provider, "--yes")
	oneError(t, code, errOut, ExitError, `node "nope" not found`, "see 'kubectl get nodes'")
	code, _, errOut = u.vacate("release", idle, "--provider", provider, "--yes")
	oneError(t, code, errOut, ExitError, "node "+idle+" has no drain", "nothing to release")
	code, _, errOut = u.vacate("release", node, "--provider", "nope", "--yes")
	oneError(t, code, errOut, ExitError, `no Evacuation of provider "nope" on node `+node, "evacuations there: "+provider)
	code, _, errOut = u.vacate("release", node)
	oneError(t, code, errOut, ExitUsage, "--provider")
	code, out, errOut := u.vacate("release", node, "--provider", provider, "--reason", "CHG-9")
	oneError(t, code, errOut, ExitUsage, "not a terminal", "--yes")
	if !strings.Contains(out, rt.podKey) {
		t.Errorf("release without --yes did not show the pod it would let go:\n%s", out)
	}
}

// checkDryRuns: release --dry-run shows everything, --dry-run=server says
// the API server accepted it.
func (rt releaseCase) checkDryRuns(t *testing.T, u user) {
	t.Helper()
	out := u.must(ExitOK, "release", rt.node, "--provider", rt.provider, "--reason", "CHG-9", "--dry-run")
	for _, want := range []string{
		"Evacuation " + rt.evName,
		"provider:  " + rt.provider + " is being deleted",
		"protects:  1 pod(s) still on the node",
		"  " + rt.podKey,
		"their data may not have moved",
		"dry run: nothing written",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("release --dry-run output lacks %q", want)
		}
	}

	out = u.must(ExitOK, "release", rt.node, "--provider", rt.provider, "--reason", "CHG-9", "--dry-run=server")
	if !strings.Contains(out, "the API server accepted the release of evacuation/"+rt.evName+" in a server-side dry run") {
		t.Errorf("release --dry-run=server output:\n%s", out)
	}
}

// checkReleasedAndDrained: once rita released the evacuation, the drain
// reaches Drained with status.hooks showing the release, the pod left (the
// watch saw it evicted), an EvacuationReleased event is recorded, and the
// deleted provider goes.
func (rt releaseCase) checkReleasedAndDrained(t *testing.T, c *devcluster.Cluster, cl client.Client, pod *corev1.Pod, pw *podWatch) {
	t.Helper()
	final := testenv.WaitForDrain(t, cl, rt.node, "Drained", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	}, func(nd *v1alpha1.NodeDrain) string { return fmt.Sprintf("%+v", nd.Status) })
	if !slices.ContainsFunc(final.Status.Hooks, func(h v1alpha1.HookStatus) bool {
		return h.Name == rt.evName && h.Phase == v1alpha1.PhaseReleased && strings.Contains(h.Message, "released by rita at ") &&
			strings.HasSuffix(h.Message, ": CHG-9 volume lost")
	}) {
		t.Errorf("status.hooks lacks the Released entry: %+v", final.Status.Hooks)
	}
	for _, p := range testenv.PodsOnNode(t, c, rt.node) {
		if p.UID == pod.UID {
			t.Errorf("the released pod %s is still on the node", rt.podKey)
		}
	}
	waitForEvent(t, c, rt.node, v1alpha1.EventEvacuationReleased, "released by rita")
	pw.mu.Lock()
	if !pw.gone {
		t.Error("the pod watch never saw the pod evicted")
	}
	pw.mu.Unlock()
	err := wait.PollUntilContextTimeout(testenv.Context(t), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := cl.Get(ctx, types.NamespacedName{Name: rt.provider}, &v1alpha1.EvacuationProvider{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the deleted provider is still there after its evacuation was released")
	}
}

// releaseOnTerminal runs the CLI with a pseudo-terminal as stdin, typing
// answer.
func releaseOnTerminal(t *testing.T, u user, answer string, args ...string) (int, string, string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	go func() { _, _ = ptmx.Write([]byte(answer)) }()
	go func() { _, _ = bytes.NewBuffer(nil).ReadFrom(ptmx) }() // the echo
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := Run(ctx, append(args, "--kubeconfig", u.kubeconfig), Streams{In: tty, Out: &out, Err: &errOut}, clock.RealClock{})
	t.Logf("$ vacate %s  (typing %q) → exit %d\n%s%s", strings.Join(args, " "), answer, code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// waitForEvent waits for an Event of the NodeDrain with reason whose
// message contains text.
func waitForEvent(t *testing.T, c *devcluster.Cluster, drain, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=NodeDrain,involvedObject.name=" + drain + ",reason=" + reason})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Message)
			if strings.Contains(e.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event of NodeDrain %s saying %q; saw %q", reason, drain, text, seen)
	}
}

// TestReleaseNeverLandsOnAnotherDrain: the release's JSON patch tests the
// drain the Evacuation was read for. An Evacuation taken over by another
// drain after it was read (its spec.drainUID changed) is left alone: the
// API server refuses the patch and spec.release stays unset.
func TestReleaseNeverLandsOnAnotherDrain(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-release-other", Count: 1})[0]
	nd := testutil.NodeDrain(node, "", "test:release")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), nd) })
	ev := &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.EvacuationName(node, "gone")},
		Spec: v1alpha1.EvacuationSpec{NodeName: node, Provider: "gone", Mode: v1alpha1.ModeMaintenance,
			Desired: v1alpha1.DesiredEvacuate, DrainUID: string(nd.UID)}}
	if err := cl.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), ev) })

	flags := newConfigFlags()
	*flags.KubeConfig = c.Kubeconfig
	s, err := connect(ctx, flags)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := &releaseOptions{flags: flags, streams: Streams{Out: &out, Err: &out}, clock: clock.RealClock{}, provider: "gone"}
	stale := ev.DeepCopy()
	stale.Spec.DrainUID = "an-earlier-drain" // what a release read before the drain took the Evacuation over
	rel := v1alpha1.EvacuationRelease{By: "rita", Reason: "wrong drain", Time: metav1.NewTime(time.Now()).Rfc3339Copy()}
	err = o.write(ctx, s, &releaseTarget{node: getNode(t, c, node), drain: nd, ev: stale}, rel)
	if err == nil || !strings.Contains(err.Error(), "the API server refused the release of Evacuation "+ev.Name+": it was re-created or taken over by another drain") {
		t.Errorf("releasing an Evacuation read for another drain: %v, want the API server's refusal", err)
	}
	t.Logf("refused: %v", err)
	got := &v1alpha1.Evacuation{}
	if err := cl.Get(ctx, types.NamespacedName{Name: ev.Name}, got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Release != nil {
		t.Fatalf("the release landed on the Evacuation of drain %s: %+v", got.Spec.DrainUID, got.Spec.Release)
	}
}
