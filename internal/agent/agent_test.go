package agent_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/requests"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// scripted is a Source the test drives: it reports what the test sends,
// and records the notices the agent finishes.
type scripted struct {
	name    string
	initial []agent.Notice // reported at start; nil with silent
	silent  bool           // reports nothing until sent something
	send    chan []agent.Notice
	probs   chan []agent.Problem

	mu       sync.Mutex
	finished []string
}

func newScripted(name string) *scripted {
	return &scripted{name: name, send: make(chan []agent.Notice, 4), probs: make(chan []agent.Problem, 4)}
}

func (s *scripted) Name() string { return s.name }

func (s *scripted) Run(ctx context.Context, r agent.Reporter) error {
	if !s.silent {
		r.Notices(s.initial)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ns := <-s.send:
			r.Notices(ns)
		case ps := <-s.probs:
			r.Problems(ps)
		}
	}
}

func (s *scripted) Finish(_ context.Context, n agent.Notice, drained bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, fmt.Sprintf("%s drained=%t", n.Source, drained))
	return nil
}

func (s *scripted) finishes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.finished...)
}

// runAgent runs an agent for node with the sources until the test ends.
func runAgent(t *testing.T, cl client.Client, node string, sources ...agent.Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := agent.New(agent.Options{Client: cl, Node: node, Sources: sources, Interval: 200 * time.Millisecond, Log: testr.New(t)})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
}

func noticeTaint(n *corev1.Node) string {
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintNotice {
			return t.Value + ":" + string(t.Effect)
		}
	}
	return ""
}

func agentCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == agent.ConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

type fixture struct {
	c      *devcluster.Cluster
	cl     client.Client
	ns     string
	target string
}

// workload is two simulated nodes with a Deployment of four behind a PDB
// that lets one go at a time; target is the first node, with pods on it.
func workload(t *testing.T, prefix, maxUnavailable string) fixture {
	t.Helper()
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ctx := testenv.Context(t)
	sel := map[string]string{"vacate.dev/test": prefix}
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: prefix, Count: 2, Labels: sel})
	ns := testenv.Namespace(t, c)
	dep := devcluster.Deployment(ns, "api", 4)
	dep.Spec.Template.Spec.NodeSelector = sel
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, "api", "api", "", maxUnavailable), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "api"}), 4, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, "api", 4, time.Minute); err != nil {
		t.Fatal(err)
	}
	target := ""
	for _, p := range pods {
		if p.Spec.NodeName == nodes[0] || p.Spec.NodeName == nodes[1] {
			target = p.Spec.NodeName
			break
		}
	}
	return fixture{c: c, cl: cl, ns: ns, target: target}
}

func (f fixture) podsOnTarget(ctx context.Context) int {
	pods, err := f.c.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + f.target})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// TestNoticeDrainsTheNodeAndGoingBackUndoes: a spot notice becomes the
// requester agent:aws-spot with its deadline and mode, the node is tainted
// at once, drained with the PDB held, the source is told the node is
// Drained, and when the notice goes the requester is withdrawn: the drain
// is deleted, the node uncordoned and untainted.
func TestNoticeDrainsTheNodeAndGoingBackUndoes(t *testing.T) {
	f := workload(t, "agent-spot", "1")
	ctx := testenv.Context(t)
	guard := testenv.WatchPDBs(t, f.c, f.ns)
	src := newScripted("aws")
	runAgent(t, f.cl, f.target, src)

	testutil.Eventually(t, time.Minute, "the VacateAgent condition", testutil.Seen(func() (bool, string) {
		n, err := f.c.Client.CoreV1().Nodes().Get(ctx, f.target, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := agentCondition(n)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == agent.ReasonWatching, fmt.Sprintf("%+v", c)
	}))

	deadline := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	src.send <- []agent.Notice{{Source: "aws-spot", Mode: v1alpha1.ModeDecommission, Deadline: deadline, Reason: "AWS spot interruption: terminate"}}
	nd := testenv.WaitForDrain(t, f.cl, f.target, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	}, func(nd *v1alpha1.NodeDrain) string {
		return fmt.Sprintf("%s %+v %+v", nd.Status.Phase, nd.Spec, nd.Status.Conditions)
	})
	if i := requests.Index(nd, "agent:aws-spot"); i < 0 || nd.Spec.Requesters[i].Deadline == nil ||
		!nd.Spec.Requesters[i].Deadline.Time.Equal(deadline) || nd.Spec.Requesters[i].Reason != "AWS spot interruption: terminate" {
		t.Errorf("requesters %+v, want agent:aws-spot with the notice's reason and deadline %s", nd.Spec.Requesters, deadline)
	}
	if nd.Spec.Mode != v1alpha1.ModeDecommission || nd.Status.Deadline == nil || nd.Status.Deadline.Requester != "agent:aws-spot" {
		t.Errorf("mode %s, status.deadline %+v; want Decommission and the agent's deadline", nd.Spec.Mode, nd.Status.Deadline)
	}
	if n := f.podsOnTarget(ctx); n != 0 {
		t.Errorf("%d pods left on the drained node", n)
	}
	node, err := f.c.Client.CoreV1().Nodes().Get(ctx, f.target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := noticeTaint(node); got != "aws-spot:NoSchedule" {
		t.Errorf("taint %s = %q, want aws-spot:NoSchedule", v1alpha1.TaintNotice, got)
	}
	if c := agentCondition(node); c == nil || c.Reason != agent.ReasonNotice || !strings.Contains(c.Message, "agent:aws-spot") {
		t.Errorf("condition %+v, want NoticeReceived naming agent:aws-spot", c)
	}
	testutil.Eventually(t, 30*time.Second, "the source told Drained", testutil.Seen(func() (bool, string) {
		got := src.finishes()
		return len(got) == 1 && got[0] == "aws-spot drained=true", fmt.Sprint(got)
	}))
	guard.Check(t)

	// The notice goes: the agent gives the node back.
	src.send <- nil
	testutil.Eventually(t, time.Minute, "the node given back", testutil.Seen(func() (bool, string) {
		err := f.cl.Get(ctx, types.NamespacedName{Name: f.target}, &v1alpha1.NodeDrain{})
		n, nerr := f.c.Client.CoreV1().Nodes().Get(ctx, f.target, metav1.GetOptions{})
		if nerr != nil {
			return false, nerr.Error()
		}
		return apierrors.IsNotFound(err) && !n.Spec.Unschedulable && noticeTaint(n) == "",
			fmt.Sprintf("drain: %v; unschedulable %t; taint %q", err, n.Spec.Unschedulable, noticeTaint(n))
	}))
	if got := src.finishes(); len(got) != 1 {
		t.Errorf("finished %v, want once", got)
	}
}

// TestDeadlineFinishesTheNotice: a drain a PDB holds past the notice's
// deadline: the source is told at the deadline (not drained), and the pods
// stay in place. What the drain itself does at the deadline is its policy's
// onTimeout (the controller's tests).
func TestDeadlineFinishesTheNotice(t *testing.T) {
	f := workload(t, "agent-late", "0")
	src := newScripted("logind")
	runAgent(t, f.cl, f.target, src)
	deadline := time.Now().Add(5 * time.Second)
	src.send <- []agent.Notice{{Source: "shutdown", Mode: v1alpha1.ModeMaintenance, Deadline: deadline, Reason: "the machine is rebooting"}}
	testutil.Eventually(t, time.Minute, "the source told the deadline came", testutil.Seen(func() (bool, string) {
		got := src.finishes()
		return len(got) == 1 && got[0] == "shutdown drained=false", fmt.Sprint(got)
	}))
	if time.Now().Before(deadline) {
		t.Errorf("finished before the deadline %s", deadline)
	}
	if n := f.podsOnTarget(testenv.Context(t)); n == 0 {
		t.Errorf("no pod left on the node; the PDB allowed none to go")
	}
}

// TestNoticeAlreadyLateIsHeldUntilDrained: a notice whose deadline had
// passed when the agent first saw it (an event due before the agent heard
// of it, on the node's clock) is still requested with that deadline, and
// its source is not told at once, which would let the machine go with
// nothing drained: it is told when the node is Drained.
func TestNoticeAlreadyLateIsHeldUntilDrained(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "agent-due", Count: 1})[0]
	src := newScripted("logind")
	runAgent(t, cl, node, src)
	deadline := time.Now().Add(-time.Hour).Truncate(time.Second)
	src.send <- []agent.Notice{{Source: "shutdown", Mode: v1alpha1.ModeMaintenance, Deadline: deadline, Reason: "the machine is rebooting"}}
	testutil.Eventually(t, time.Minute, "the source told", testutil.Seen(func() (bool, string) {
		got := src.finishes()
		return len(got) > 0, fmt.Sprint(got)
	}))
	if got := src.finishes(); len(got) != 1 || got[0] != "shutdown drained=true" {
		t.Errorf("finished %v, want once, when the node was Drained", got)
	}
	nd := &v1alpha1.NodeDrain{}
	if err := cl.Get(testenv.Context(t), types.NamespacedName{Name: node}, nd); err != nil {
		t.Fatal(err)
	}
	if i := requests.Index(nd, "agent:shutdown"); i < 0 || nd.Spec.Requesters[i].Deadline == nil || !nd.Spec.Requesters[i].Deadline.Time.Equal(deadline) {
		t.Errorf("requesters %+v, want agent:shutdown with the notice's deadline %s", nd.Spec.Requesters, deadline)
	}
	if nd.Status.Phase != v1alpha1.PhaseDrained {
		t.Errorf("drain %s when the source was told, want Drained", nd.Status.Phase)
	}
}

// TestRestartWithdrawsOnlyWhatNoSourceReports: after a restart (a node
// back from a reboot) the agent withdraws a requester of its own that no
// source reports, but only once every source has reported: a source that
// has not answered yet may still hold that notice. Others' requesters
// stay. A source's problem shows in the node's condition.
func TestRestartWithdrawsOnlyWhatNoSourceReports(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "agent-restart", Count: 1})[0]
	for _, r := range []string{"agent:shutdown", "cli:alice"} {
		if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: r}, v1alpha1.ModeMaintenance, ""); err != nil {
			t.Fatal(err)
		}
	}
	requesters := func(ctx context.Context) (bool, string) {
		nd := &v1alpha1.NodeDrain{}
		if err := cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, r := range nd.Spec.Requesters {
			names = append(names, r.Name)
		}
		return strings.Join(names, ",") == "cli:alice", strings.Join(names, ",")
	}
	logind, cloud := newScripted("logind"), newScripted("aws")
	cloud.silent = true
	runAgent(t, cl, node, logind, cloud)

	// logind reported nothing, aws not yet: agent:shutdown stays.
	time.Sleep(2 * time.Second)
	if ok, got := requesters(ctx); ok {
		t.Fatalf("requesters %s: withdrawn before every source reported", got)
	}
	cloud.probs <- []agent.Problem{{Source: "aws", Reason: "MetadataUnavailable", Message: "the metadata service does not answer"}}
	testutil.Eventually(t, 30*time.Second, "the problem in the node's condition", testutil.Seen(func() (bool, string) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := agentCondition(n)
		return cond != nil && cond.Status == corev1.ConditionFalse && cond.Reason == "MetadataUnavailable" &&
			strings.Contains(cond.Message, "aws: the metadata service does not answer"), fmt.Sprintf("%+v", cond)
	}))
	cloud.send <- nil
	testutil.Eventually(t, 30*time.Second, "agent:shutdown withdrawn, cli:alice kept", testutil.Seen(func() (bool, string) { return requesters(ctx) }))
}

// owning is a scripted source that says which notices it reports.
type owning struct {
	*scripted
	owns []string
}

func (o owning) NoticeSources() []string { return o.owns }

// TestRestartWithdrawsPerSource: with sources that say which notices they
// report, a stale requester is withdrawn as soon as its own source has
// reported, even while another source (a metadata service down at boot)
// has not; that source's stale requester waits for it.
func TestRestartWithdrawsPerSource(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ctx := testenv.Context(t)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "agent-owners", Count: 1})[0]
	for _, r := range []string{"agent:shutdown", "agent:aws-spot", "cli:alice"} {
		if err := requests.Apply(ctx, cl, node, v1alpha1.Requester{Name: r}, v1alpha1.ModeMaintenance, ""); err != nil {
			t.Fatal(err)
		}
	}
	requesters := func(want string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			nd := &v1alpha1.NodeDrain{}
			if err := cl.Get(ctx, types.NamespacedName{Name: node}, nd); err != nil {
				return false, err.Error()
			}
			var names []string
			for _, r := range nd.Spec.Requesters {
				names = append(names, r.Name)
			}
			// As a set: under -count the drain of an earlier run (with
			// cli:alice) may hold the entries in another order.
			slices.Sort(names)
			return strings.Join(names, ",") == want, strings.Join(names, ",")
		}
	}
	logind := owning{newScripted("logind"), []string{"shutdown"}}
	cloud := owning{newScripted("aws"), []string{"aws-spot", "aws-asg"}}
	cloud.silent = true
	runAgent(t, cl, node, logind, cloud)
	testutil.Eventually(t, 30*time.Second, "agent:shutdown withdrawn while aws has not answered", testutil.Seen(func() (bool, string) { return requesters("agent:aws-spot,cli:alice")(ctx) }))
	time.Sleep(time.Second)
	if ok, got := requesters("agent:aws-spot,cli:alice")(ctx); !ok {
		t.Fatalf("requesters %s: agent:aws-spot withdrawn before its source reported", got)
	}
	cloud.send <- nil
	testutil.Eventually(t, 30*time.Second, "agent:aws-spot withdrawn once aws reported", testutil.Seen(func() (bool, string) { return requesters("cli:alice")(ctx) }))
}
