package drain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestPlanDecidesEachKindOfPod(t *testing.T) {
	pod := testutil.Pod
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		rules  Rules
		action Action
		reason Reason
	}{
		{"replicaset pod", pod("web-1").OwnedBy("ReplicaSet", "web").Obj(), Rules{}, Evict, ReasonEvictable},
		{"statefulset pod", pod("db-0").OwnedBy("StatefulSet", "db").Obj(), Rules{}, Evict, ReasonEvictable},
		{"daemonset pod ignored", pod("agent-x").OwnedBy("DaemonSet", "agent").Obj(), Rules{}, Skip, ReasonDaemonSet},
		{"daemonset pod evicted by policy", pod("agent-x").OwnedBy("DaemonSet", "agent").Obj(), Rules{EvictDaemonSets: true}, Evict, ReasonDaemonSet},
		{"mirror pod", pod("etcd-n1").Annotate(corev1.MirrorPodAnnotationKey, "x").Obj(), Rules{}, Skip, ReasonMirrorPod},
		{"bare pod blocks", pod("lonely").Obj(), Rules{}, Block, ReasonUnmanaged},
		{"bare pod deleted by policy", pod("lonely").Obj(), Rules{DeleteUnmanaged: true}, Evict, ReasonUnmanaged},
		{"a surge's replacement is waited on", pod("web-abc-x").Labels(SurgeReplacementLabel, "uid-1").OwnedByDrain("n1").Obj(), Rules{DeleteUnmanaged: true}, Wait, ReasonSurgeReplacement},
		{"a pod with the surge label alone is a bare pod (a decoy)", pod("decoy").Labels(SurgeReplacementLabel, "uid-1").Obj(), Rules{DeleteUnmanaged: true}, Evict, ReasonUnmanaged},
		{"a decoy blocks as a bare pod does", pod("decoy").Labels(SurgeReplacementLabel, "uid-1").Obj(), Rules{}, Block, ReasonUnmanaged},
		{"a replacement handed over, not yet adopted, is waited on", pod("web-abc-x").Labels(SurgeReplacementLabel, "uid-1", "pod-template-hash", "abc").Created(now.Add(-time.Minute)).Obj(), Rules{DeleteUnmanaged: true}, Wait, ReasonSurgeReplacement},
		{"a pod that only looks handed over, for minutes, is a bare pod", pod("decoy").Labels(SurgeReplacementLabel, "uid-1", "pod-template-hash", "abc").Created(now.Add(-3 * time.Minute)).Obj(), Rules{}, Block, ReasonUnmanaged},
		{"emptyDir blocks", pod("cache-1").OwnedBy("ReplicaSet", "cache").EmptyDir("scratch").Obj(), Rules{}, Block, ReasonLocalStorage},
		{"emptyDir evicted by policy", pod("cache-1").OwnedBy("ReplicaSet", "cache").EmptyDir("scratch").Obj(), Rules{EvictLocalStorage: true}, Evict, ReasonLocalStorage},
		{"succeeded pod", pod("job-1").OwnedBy("Job", "j").Phase(corev1.PodSucceeded).Obj(), Rules{}, Skip, ReasonCompleted},
		{"failed bare pod", pod("oops").Phase(corev1.PodFailed).Obj(), Rules{}, Skip, ReasonCompleted},
		{"terminating pod", pod("web-2").OwnedBy("ReplicaSet", "web").Terminating(now.Add(-30 * time.Second)).Obj(), Rules{}, Wait, ReasonTerminating},
		{"terminating bare pod waits, does not block", pod("lonely").Terminating(now).Obj(), Rules{}, Wait, ReasonTerminating},
		{"skip annotation", pod("keep").OwnedBy("ReplicaSet", "k").Annotate(PodAnnotation, "skip").Obj(), Rules{}, Skip, ReasonSkipAnnotation},
		{"skip annotation on bare pod", pod("keep").Annotate(PodAnnotation, "skip").Obj(), Rules{}, Skip, ReasonSkipAnnotation},
		{"wait-completed job pod", pod("job-2").OwnedBy("Job", "j").Annotate(PodAnnotation, "wait-completed").Obj(), Rules{}, Wait, ReasonWaitCompletion},
		{"wait-completed pod that completed", pod("job-3").OwnedBy("Job", "j").Annotate(PodAnnotation, "wait-completed").Phase(corev1.PodSucceeded).Obj(), Rules{}, Skip, ReasonCompleted},
		{"unknown annotation value is ignored", pod("web-3").OwnedBy("ReplicaSet", "web").Annotate(PodAnnotation, "maybe").Obj(), Rules{}, Evict, ReasonEvictable},
		{"skip selector", pod("mon").OwnedBy("ReplicaSet", "mon").Labels("tier", "monitoring").Obj(),
			Rules{SkipSelector: labels.SelectorFromSet(labels.Set{"tier": "monitoring"})}, Skip, ReasonSkipSelector},
		{"skip selector not matching", pod("web-4").OwnedBy("ReplicaSet", "web").Labels("tier", "web").Obj(),
			Rules{SkipSelector: labels.SelectorFromSet(labels.Set{"tier": "monitoring"})}, Evict, ReasonEvictable},
		{"empty skip selector matches nothing", pod("web-5").OwnedBy("ReplicaSet", "web").Obj(),
			Rules{SkipSelector: labels.Everything()}, Evict, ReasonEvictable},
		{"a requester's pod selector leaves what it does not match", pod("db-0").OwnedBy("StatefulSet", "db").Labels("app", "db").Obj(),
			Rules{OnlySelector: labels.SelectorFromSet(labels.Set{"app": "web"})}, Skip, ReasonNotSelected},
		{"a requester's pod selector moves what it matches", pod("web-6").OwnedBy("ReplicaSet", "web").Labels("app", "web").Obj(),
			Rules{OnlySelector: labels.SelectorFromSet(labels.Set{"app": "web"})}, Evict, ReasonEvictable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New([]*corev1.Pod{tc.pod}, nil, tc.rules, now)
			if len(p.Decisions) != 1 {
				t.Fatalf("%d decisions, want 1", len(p.Decisions))
			}
			d := p.Decisions[0]
			if d.Action != tc.action || d.Reason != tc.reason {
				t.Errorf("decision = %s/%s (%s), want %s/%s", d.Action, d.Reason, d.Detail, tc.action, tc.reason)
			}
			if d.Action != Evict && d.Detail == "" {
				t.Errorf("decision %s/%s has no detail for people", d.Action, d.Reason)
			}
		})
	}
}

func TestPlanNamesBlockingPDBs(t *testing.T) {
	pods := []*corev1.Pod{
		testutil.Pod("web-1").OwnedBy("ReplicaSet", "web").Labels("app", "web").Obj(),
		testutil.Pod("api-1").OwnedBy("ReplicaSet", "api").Labels("app", "api").Obj(),
		testutil.Pod("db-0").Namespace("data").OwnedBy("StatefulSet", "db").Labels("app", "web").Obj(),
	}
	pdbs := []*policyv1.PodDisruptionBudget{
		testutil.PDB("default", "web", "web", 0, 0),
		testutil.PDB("default", "api", "api", 1, 1),
	}
	p := New(pods, GuardsOf(pdbs...), Rules{}, now)
	byName := map[string]Decision{}
	for _, d := range p.Decisions {
		byName[d.Key()] = d
	}
	web := byName["default/web-1"]
	if !web.PDBBlocked || web.Action != Evict || !strings.Contains(web.Detail, "default/web") {
		t.Errorf("web-1: %+v, want an eviction blocked by PDB default/web", web)
	}
	if api := byName["default/api-1"]; api.PDBBlocked || len(api.PDBs) != 1 || api.PDBs[0] != "default/api" {
		t.Errorf("api-1: %+v, want guarded by default/api and not blocked", api)
	}
	if db := byName["data/db-0"]; len(db.PDBs) != 0 {
		t.Errorf("db-0 in another namespace is guarded by %v, want none", db.PDBs)
	}
	if got := len(p.Blocked()); got != 1 {
		t.Errorf("%d blocked decisions, want 1", got)
	}
	want := "3 to evict; blocked: default/web-1 (PodDisruptionBudget)"
	if msg := p.ConditionMessage(); msg != want {
		t.Errorf("message = %q, want %q", msg, want)
	}
}

func TestPlanCountsAndMessage(t *testing.T) {
	pods := []*corev1.Pod{
		testutil.Pod("z-web").OwnedBy("ReplicaSet", "web").Obj(),
		testutil.Pod("a-agent").OwnedBy("DaemonSet", "agent").Obj(),
		testutil.Pod("m-bare").Obj(),
		testutil.Pod("t-leaving").OwnedBy("ReplicaSet", "web").Terminating(now).Obj(),
	}
	p := New(pods, nil, Rules{}, now)
	if p.Remaining() != 3 || p.Count(Evict) != 1 || p.Count(Block) != 1 || p.Count(Wait) != 1 || p.Completed() {
		t.Errorf("remaining %d, evict %d, block %d, wait %d, completed %t", p.Remaining(), p.Count(Evict), p.Count(Block), p.Count(Wait), p.Completed())
	}
	// Sorted by namespace/name, whatever the input order.
	var names []string
	for _, d := range p.Decisions {
		names = append(names, d.Pod.Name)
	}
	if got := strings.Join(names, ","); got != "a-agent,m-bare,t-leaving,z-web" {
		t.Errorf("order = %s", got)
	}
	if msg := p.ConditionMessage(); msg != "1 to evict, 1 to wait, 1 to block; blocked: default/m-bare (Unmanaged); left in place: 1 DaemonSetPod" {
		t.Errorf("message = %q", msg)
	}
	empty := New([]*corev1.Pod{testutil.Pod("a").OwnedBy("DaemonSet", "d").Obj()}, nil, Rules{}, now)
	if !empty.Completed() || empty.ConditionMessage() != "no pods left to move; left in place: 1 DaemonSetPod" {
		t.Errorf("only a DaemonSet pod left: completed %t, message %q", empty.Completed(), empty.ConditionMessage())
	}
}

func TestConditionMessageTruncates(t *testing.T) {
	var pods []*corev1.Pod
	for _, n := range []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7"} {
		pods = append(pods, testutil.Pod(n).Obj())
	}
	msg := New(pods, nil, Rules{}, now).ConditionMessage()
	if !strings.HasSuffix(msg, "default/b5 (Unmanaged), and 2 more") {
		t.Errorf("message = %q, want five pods named and the rest counted", msg)
	}
}

// FuzzPlan checks invariants on arbitrary pods: every pod gets exactly one
// decision with a reason, and Remaining counts what is not skipped.
func FuzzPlan(f *testing.F) {
	f.Add("web", "ReplicaSet", "", false, false, uint8(0))
	f.Add("agent", "DaemonSet", "skip", true, false, uint8(1))
	f.Add("bare", "", "wait-completed", false, true, uint8(2))
	f.Fuzz(func(t *testing.T, name, ownerKind, annotation string, emptyDir, terminating bool, phase uint8) {
		b := testutil.Pod("p-"+name).Annotate(PodAnnotation, annotation)
		if ownerKind != "" {
			b.OwnedBy(ownerKind, "owner")
		}
		if emptyDir {
			b.EmptyDir("scratch")
		}
		if terminating {
			b.Terminating(now)
		}
		b.Phase([]corev1.PodPhase{corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed}[phase%4])
		pods := []*corev1.Pod{b.Obj(), testutil.Pod("other").OwnedBy("ReplicaSet", "x").Obj()}
		for _, r := range []Rules{{}, {EvictDaemonSets: true, DeleteUnmanaged: true, EvictLocalStorage: true}, {NodeNotReady: true}} {
			p := New(pods, nil, r, now)
			if len(p.Decisions) != len(pods) {
				t.Fatalf("%d decisions for %d pods", len(p.Decisions), len(pods))
			}
			skipped := 0
			for _, d := range p.Decisions {
				if d.Reason == "" || d.Action == "" {
					t.Fatalf("decision without action or reason: %+v", d)
				}
				if d.Action == Skip {
					skipped++
				}
			}
			if p.Remaining() != len(pods)-skipped {
				t.Fatalf("remaining %d, want %d", p.Remaining(), len(pods)-skipped)
			}
			if p.Completed() != (p.Remaining() == 0) {
				t.Fatal("Completed disagrees with Remaining")
			}
		}
	})
}

func TestForecastRoundsAndStuck(t *testing.T) {
	grace := int64(10)
	var pods []*corev1.Pod
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		p := testutil.Pod(name).Namespace("shop").OnNode("n1").OwnedBy("ReplicaSet", "web-x").Labels("app", "web").Obj()
		p.Spec.TerminationGracePeriodSeconds = &grace
		pods = append(pods, p)
	}
	pods = append(pods, testutil.Pod("db-0").Namespace("shop").OnNode("n1").OwnedBy("StatefulSet", "db").Labels("app", "db").Obj())
	web := testutil.PDB("shop", "web", "web", 1, 2)
	db := testutil.PDB("shop", "db", "db", 0, 0)

	f := NewForecast(New(pods, GuardsOf(web, db), Rules{}, now), nil, 10)
	if len(f.PDBs) != 2 || f.PDBs[0].Name != "shop/db" || !f.PDBs[0].Blocks || f.PDBs[1].Name != "shop/web" || f.PDBs[1].Blocks {
		t.Fatalf("PDB forecasts: %+v", f.PDBs)
	}
	if got := f.PDBs[1].Rounds; got != 2 { // 3 pods, 2 at a time
		t.Errorf("web rounds = %d, want 2", got)
	}
	if !f.Stuck || f.MaxGrace != 30*time.Second {
		t.Errorf("stuck=%v maxGrace=%s, want stuck and 30s (db-0 has the default grace)", f.Stuck, f.MaxGrace)
	}

	// Without the blocking PDB and with a grace override: 2 rounds, not stuck.
	override := int64(5)
	f = NewForecast(New(pods[:3], GuardsOf(web), Rules{}, now), &override, 10)
	if f.Stuck || f.Rounds != 2 || f.Low != ReplacementReady || f.High != ReplacementReady+2*5*time.Second {
		t.Fatalf("forecast %+v", f)
	}
	// The evictions in flight per node bound the rounds too.
	if f := NewForecast(New(pods[:3], nil, Rules{}, now), nil, 1); f.Rounds != 3 {
		t.Errorf("rounds with 1 eviction in flight = %d, want 3", f.Rounds)
	}
}

func TestVacateComponentsLeaveLast(t *testing.T) {
	ctl := testutil.Pod("vacate-controller-1").Namespace("vacate-system").OnNode("n1").OwnedBy("ReplicaSet", "vacate-controller-x").
		Labels(ComponentLabel, ComponentValue).Obj()
	web := testutil.Pod("web-1").Namespace("shop").OnNode("n1").OwnedBy("ReplicaSet", "web-x").Obj()
	ds := testutil.Pod("agent-1").Namespace("shop").OnNode("n1").OwnedBy("DaemonSet", "agent").Obj()

	plan := New([]*corev1.Pod{ctl, web, ds}, nil, Rules{}, now)
	byPod := map[string]Decision{}
	for _, d := range plan.Decisions {
		byPod[d.Pod.Name] = d
	}
	if d := byPod["vacate-controller-1"]; d.Action != Wait || d.Reason != ReasonVacateLast {
		t.Errorf("vacate's pod while web-1 must leave: %s %s, want Wait %s", d.Action, d.Reason, ReasonVacateLast)
	}
	if d := byPod["web-1"]; d.Action != Evict {
		t.Errorf("web-1: %s, want Evict", d.Action)
	}
	if plan.Completed() {
		t.Error("plan completed with vacate's own pod still on the node")
	}
	// Once the others are gone (the DaemonSet pod stays: it is skipped),
	// vacate's pod is evicted.
	plan = New([]*corev1.Pod{ctl, ds}, nil, Rules{}, now)
	for _, d := range plan.Decisions {
		if d.Pod.Name == "vacate-controller-1" && d.Action != Evict {
			t.Errorf("vacate's pod alone: %s %s, want Evict", d.Action, d.Reason)
		}
	}
}

func TestTerminatingPodsOnUnreachableNodes(t *testing.T) {
	pod := func() *testutil.PodBuilder { return testutil.Pod("web-1").OwnedBy("ReplicaSet", "web") }
	ready := Rules{UnreachablePods: 5 * time.Minute}
	notReady := func(since time.Duration) Rules {
		r := ready
		r.NodeNotReady = true
		if since != 0 {
			r.NodeNotReadySince = now.Add(-since)
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		rules  Rules
		action Action
		reason Reason
		detail string
	}{
		{"ready node: always waited on", pod().Terminating(now.Add(-time.Hour)).Obj(), ready, Wait, ReasonTerminating, "terminating for 1h0m0s"},
		{"not ready, before the timeout", pod().Terminating(now.Add(-4 * time.Minute)).Obj(), notReady(time.Hour), Wait, ReasonTerminating,
			"waited on until 2026-11-22T12:01:00Z (timeouts.unreachablePods 5m0s)"},
		{"not ready, at the timeout", pod().Terminating(now.Add(-5 * time.Minute)).Obj(), notReady(time.Hour), Skip, ReasonUnreachableTerminating,
			"grace period ended 2026-11-22T11:55:00Z on a node not Ready since 2026-11-22T11:00:00Z; its kubelet cannot confirm the pod stopped"},
		{"not ready only recently: counted from then", pod().Terminating(now.Add(-time.Hour)).Obj(), notReady(time.Minute), Wait, ReasonTerminating,
			"waited on until 2026-11-22T12:04:00Z"},
		{"not ready since an unknown time: counted from the deletion", pod().Terminating(now.Add(-6 * time.Minute)).Obj(), notReady(0), Skip, ReasonUnreachableTerminating,
			"on a node that is not Ready; its kubelet cannot confirm the pod stopped"},
		{"grace period not over, no timeout", pod().Terminating(now.Add(30 * time.Second)).Obj(), Rules{NodeNotReady: true}, Wait, ReasonTerminating, "already terminating"},
		{"no timeout once the grace period is over", pod().Terminating(now).Obj(), Rules{NodeNotReady: true}, Skip, ReasonUnreachableTerminating, "not waited on after timeouts.unreachablePods (0s)"},
		{"not terminating: evicted as usual", pod().Obj(), notReady(time.Hour), Evict, ReasonEvictable, ""},
		{"bare pod", testutil.Pod("lonely").Terminating(now.Add(-time.Hour)).Obj(), notReady(time.Hour), Skip, ReasonUnreachableTerminating, "kubelet cannot confirm"},
		{"completed pod stays Completed", pod().Phase(corev1.PodSucceeded).Terminating(now.Add(-time.Hour)).Obj(), notReady(time.Hour), Skip, ReasonCompleted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New([]*corev1.Pod{tc.pod}, nil, tc.rules, now).Decisions[0]
			if d.Action != tc.action || d.Reason != tc.reason || !strings.Contains(d.Detail, tc.detail) {
				t.Errorf("decision = %s/%s (%s), want %s/%s with detail containing %q", d.Action, d.Reason, d.Detail, tc.action, tc.reason, tc.detail)
			}
		})
	}
}

func TestRulesForNode(t *testing.T) {
	since := metav1.NewTime(now.Add(-10 * time.Minute))
	added := metav1.NewTime(now.Add(-3 * time.Minute))
	node := func(status corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
		n := &corev1.Node{Spec: corev1.NodeSpec{Taints: taints}}
		if status != "" {
			n.Status.Conditions = []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: status, LastTransitionTime: since},
			}
		}
		return n
	}
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &added}
	stale := Rules{UnreachablePods: time.Minute, NodeNotReady: true, NodeNotReadySince: now}
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		notReady bool
		since    time.Time
	}{
		{"nil node", nil, false, time.Time{}},
		{"ready", node(corev1.ConditionTrue), false, time.Time{}},
		{"ready false", node(corev1.ConditionFalse), true, since.Time},
		{"ready unknown, tainted", node(corev1.ConditionUnknown, unreachable), true, since.Time},
		{"no ready condition", node(""), true, time.Time{}},
		{"ready but tainted unreachable", node(corev1.ConditionTrue, unreachable), true, added.Time},
		{"ready, other taints", node(corev1.ConditionTrue, corev1.Taint{Key: "vacate.dev/drain", Effect: corev1.TaintEffectNoSchedule}), false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := stale.ForNode(tc.node)
			if r.NodeNotReady != tc.notReady || !r.NodeNotReadySince.Equal(tc.since) || r.UnreachablePods != time.Minute {
				t.Errorf("ForNode = notReady %t since %s (timeout %s), want notReady %t since %s", r.NodeNotReady, r.NodeNotReadySince, r.UnreachablePods, tc.notReady, tc.since)
			}
		})
	}
}

func TestUnreachablePodsAreReportedNotWaitedOn(t *testing.T) {
	r := Rules{UnreachablePods: 5 * time.Minute, NodeNotReady: true}
	pods := []*corev1.Pod{
		testutil.Pod("web-1").OwnedBy("ReplicaSet", "web").Terminating(now.Add(-10 * time.Minute)).Obj(),
		testutil.Pod("web-2").OwnedBy("ReplicaSet", "web").Terminating(now.Add(-time.Minute)).Obj(),
		testutil.Pod("agent-1").OwnedBy("DaemonSet", "agent").Obj(),
		testutil.Pod("vacate-agent-1").OwnedBy("DaemonSet", "vacate-agent").Labels(ComponentLabel, ComponentValue).Obj(),
	}
	p := New(pods, nil, r, now)
	if p.Remaining() != 1 || p.Count(Wait) != 1 || p.Completed() {
		t.Errorf("remaining %d, wait %d, completed %t: want web-2 still waited on", p.Remaining(), p.Count(Wait), p.Completed())
	}
	if want := now.Add(4 * time.Minute); !p.Recheck.Equal(want) {
		t.Errorf("recheck = %s, want %s, when web-2 stops being waited on", p.Recheck, want)
	}
	if msg, want := p.ConditionMessage(), "1 to wait; not waited on: default/web-1 (UnreachableTerminating); left in place: 2 DaemonSetPod"; msg != want {
		t.Errorf("message = %q, want %q", msg, want)
	}

	p = New(pods, nil, r, now.Add(4*time.Minute))
	if !p.Completed() || !p.Recheck.IsZero() {
		t.Errorf("after the timeout: completed %t, recheck %s; want completed and nothing to recheck", p.Completed(), p.Recheck)
	}
	if msg, want := p.ConditionMessage(), "no pods left to move; not waited on: default/web-1 (UnreachableTerminating), default/web-2 (UnreachableTerminating); left in place: 2 DaemonSetPod"; msg != want {
		t.Errorf("message = %q, want %q", msg, want)
	}
	// The same pods on a Ready node are all waited on, and nothing is rechecked.
	p = New(pods, nil, r.ForNode(&corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}), now.Add(time.Hour))
	if p.Count(Wait) != 2 || p.Count(Skip) != 2 || !p.Recheck.IsZero() {
		t.Errorf("ready node: wait %d, skip %d, recheck %s; want both terminating pods waited on", p.Count(Wait), p.Count(Skip), p.Recheck)
	}
}

func TestUnreachableMessageTruncates(t *testing.T) {
	var pods []*corev1.Pod
	for _, n := range []string{"u1", "u2", "u3", "u4", "u5", "u6"} {
		pods = append(pods, testutil.Pod(n).OwnedBy("ReplicaSet", "web").Terminating(now.Add(-time.Hour)).Obj())
	}
	msg := New(pods, nil, Rules{NodeNotReady: true}, now).ConditionMessage()
	if want := "no pods left to move; not waited on: default/u1 (UnreachableTerminating), default/u2 (UnreachableTerminating), default/u3 (UnreachableTerminating), default/u4 (UnreachableTerminating), default/u5 (UnreachableTerminating), and 1 more"; msg != want {
		t.Errorf("message = %q, want %q", msg, want)
	}
}
