package drain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/internal/testutil"
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
	p := New(pods, pdbs, Rules{}, now)
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
		for _, r := range []Rules{{}, {EvictDaemonSets: true, DeleteUnmanaged: true, EvictLocalStorage: true}} {
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

	f := NewForecast(New(pods, []*policyv1.PodDisruptionBudget{web, db}, Rules{}, now), []*policyv1.PodDisruptionBudget{web, db}, nil, 10)
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
	f = NewForecast(New(pods[:3], []*policyv1.PodDisruptionBudget{web}, Rules{}, now), []*policyv1.PodDisruptionBudget{web}, &override, 10)
	if f.Stuck || f.Rounds != 2 || f.Low != ReplacementReady || f.High != ReplacementReady+2*5*time.Second {
		t.Fatalf("forecast %+v", f)
	}
	// The evictions in flight per node bound the rounds too.
	if f := NewForecast(New(pods[:3], nil, Rules{}, now), nil, nil, 1); f.Rounds != 3 {
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
