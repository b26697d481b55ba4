package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var now = time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)

func stuck(blockers ...v1alpha1.Blocker) *v1alpha1.NodeDrain {
	nd := testutil.NodeDrain("n1", "", "cli:alice")
	nd.Status = v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseEvicting, Total: 4, Evicted: 2, Remaining: 2,
		Blocked: int32(len(blockers)), Blockers: blockers}
	return nd
}

func pdbBlocker(pod, pdb string) v1alpha1.Blocker {
	return v1alpha1.Blocker{Pod: pod, Reason: "PodDisruptionBudget", Holder: "PodDisruptionBudget " + pdb,
		Detail: "PodDisruptionBudget " + pdb + " allows no disruption now", Since: metav1.NewTime(now.Add(-90 * time.Second))}
}

func pdb(name string, min intstr.IntOrString, healthy, desired, expected, allowed int32) *policyv1.PodDisruptionBudget {
	p := testutil.PDB("shop", name, name, 0, allowed)
	p.Spec.MaxUnavailable, p.Spec.MinAvailable = nil, &min
	p.Status.CurrentHealthy, p.Status.DesiredHealthy, p.Status.ExpectedPods = healthy, desired, expected
	return p
}

func TestExplain(t *testing.T) {
	cases := append(pdbExplainCases(), podExplainCases()...)
	for _, tc := range append(cases, drainExplainCases()...) {
		t.Run(tc.name, func(t *testing.T) { explains(t, tc.in, tc.want) })
	}
}

// explains checks that the explanation of in holds want, in order, and
// returns it.
func explains(t *testing.T, in Input, want []string) string {
	t.Helper()
	in.Now = now
	var buf bytes.Buffer
	if err := Explain(in).Write(&buf, now); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("explanation lacks (in order) %q:\n%s", w, out)
		}
		rest = rest[i+len(w):]
	}
	return out
}

// explainCase is what Explain reads and the lines its explanation must
// hold.
type explainCase struct {
	name string
	in   Input
	want []string // in the written explanation, in order
}

// pdbExplainCases are pods a PDB blocks: short of healthy pods, never
// allowing an eviction, allowing again, or gone.
func pdbExplainCases() []explainCase {
	readyPod := func(name string) *corev1.Pod {
		p := testutil.Pod(name).Namespace("shop").Obj()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return p
	}
	pending := testutil.Pod("web-3").Namespace("shop").Obj()
	pending.Status.Phase = corev1.PodPending
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Message: "0/8 nodes are available: 8 node(s) were unschedulable"}}
	notReady := readyPod("web-2")
	notReady.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse,
		LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Minute)), Message: "readiness probe failed"}
	return []explainCase{{
		name: "PDB short of healthy pods names them and why",
		in: Input{Drain: stuck(pdbBlocker("shop/web-1", "shop/web")),
			PDBs:    map[string]*policyv1.PodDisruptionBudget{"shop/web": pdb("web", intstr.FromInt32(3), 1, 3, 3, 0)},
			PDBPods: map[string][]*corev1.Pod{"shop/web": {readyPod("web-1"), notReady, pending}}},
		want: []string{
			"drain of node n1: Evicting, 2 of 4 pod(s) evicted, 1 blocked",
			"1. pod shop/web-1 (for 1m30s)",
			"why:  PDB shop/web allows 0 disruptions: 1 of 3 pods are healthy and it needs 3 (minAvailable 3); not healthy: " +
				"shop/web-2 is not Ready for 2m0s (readiness probe failed); shop/web-3 is Pending (0/8 nodes are available: 8 node(s) were unschedulable)",
			"do:   the drain continues by itself when they are healthy; or relax the PDB (kubectl edit pdb -n shop web; now minAvailable 3)",
		},
	}, {
		name: "PDB that never allows an eviction, one finding for its two pods",
		in: Input{Drain: stuck(pdbBlocker("shop/db-0", "shop/db"), pdbBlocker("shop/db-1", "shop/db")),
			PDBs:    map[string]*policyv1.PodDisruptionBudget{"shop/db": pdb("db", intstr.FromString("100%"), 3, 3, 3, 0)},
			PDBPods: map[string][]*corev1.Pod{"shop/db": {readyPod("db-0"), readyPod("db-1"), readyPod("db-2")}}},
		want: []string{
			"1. pod shop/db-0, shop/db-1 (for 1m30s)",
			"why:  PDB shop/db allows 0 disruptions even with all 3 of its pods healthy: minAvailable 100% never allows an eviction",
			"do:   relax the PDB (kubectl edit pdb -n shop db; now minAvailable 100%), or scale the workload up so it has a spare pod",
		},
	}, {
		name: "PDB that allows again, and one that is gone",
		in: Input{Drain: stuck(pdbBlocker("shop/web-1", "shop/web"), pdbBlocker("shop/x-1", "shop/x")),
			PDBs: map[string]*policyv1.PodDisruptionBudget{"shop/web": pdb("web", intstr.FromInt32(2), 3, 2, 3, 1), "shop/x": nil}},
		want: []string{
			"why:  PDB shop/web refused an eviction, but allows 1 disruption(s) now",
			"do:   nothing: vacate retries the eviction as soon as the PDB allows it",
			"why:  PDB shop/x refused the eviction, and it no longer exists",
		},
	}}
}

// podExplainCases are pods the policy will not evict, and pods waiting on
// their surge.
func podExplainCases() []explainCase {
	return []explainCase{{
		name: "pods the policy will not evict get their choices",
		in: Input{Drain: stuck(
			v1alpha1.Blocker{Pod: "shop/loner", Reason: "Unmanaged", Detail: "no controller", Since: metav1.NewTime(now)},
			v1alpha1.Blocker{Pod: "shop/cache", Reason: "LocalStorage", Detail: "emptyDir scratch would be lost", Since: metav1.NewTime(now)},
			v1alpha1.Blocker{Pod: "shop/job-1", Reason: "WaitForCompletion", Detail: "waiting", Since: metav1.NewTime(now)})},
		want: []string{
			"pod shop/loner", "no controller owns it, so evicting it would delete it for good",
			"kubectl delete pod -n shop loner", "vacate.dev/drain=skip", "pods.unmanaged: Delete",
			"pod shop/cache", "emptyDir scratch would be lost", "pods.localStorage: Evict", "kubectl annotate pod -n shop cache vacate.dev/drain=skip",
			"pod shop/job-1", "it asked the drain to wait until it completes (vacate.dev/drain=wait-completed)",
			"kubectl annotate pod -n shop job-1 vacate.dev/drain-",
		},
	}, {
		name: "pods waiting on their surge: starting, and failed",
		in: Input{Drain: stuck(
			v1alpha1.Blocker{Pod: "shop/web-1", Reason: v1alpha1.BlockerSurge, Holder: "ReplicaSet shop/web-abc",
				Detail: "replacement web-abc-x: not scheduled yet", Since: metav1.NewTime(now.Add(-time.Minute))},
			v1alpha1.Blocker{Pod: "shop/api-1", Reason: v1alpha1.BlockerSurgeFailed, Holder: "ReplicaSet shop/api-def",
				Detail: "replacement api-def-y was not Ready within 5m0s (surge.readyTimeout)", Since: metav1.NewTime(now)})},
		want: []string{
			"pod shop/api-1", "its replacement did not become Ready in time, so the pod stays", "not Ready within 5m0s",
			"make room for one more pod of it", "raise surge.readyTimeout", "vacate.dev/surge=false",
			"pod shop/web-1 (for 1m00s)", "it leaves once a replacement is Ready on another node: replacement web-abc-x: not scheduled yet",
			"kubectl get pods -n shop -l vacate.dev/surge-of",
		},
	}, {
		name: "a pod whose replacement's create was refused",
		in: Input{Drain: func() *v1alpha1.NodeDrain {
			nd := stuck(v1alpha1.Blocker{Pod: "shop/web-1", Reason: v1alpha1.BlockerSurgeFailed, Holder: "ReplicaSet shop/web-abc",
				Detail: `vacate could not create its replacement: pods "web-abc-x" is forbidden: exceeded quota: pods; trying again in 30s`,
				Since:  metav1.NewTime(now)})
			nd.Status.Surges = []v1alpha1.SurgeStatus{{Pod: "shop/web-1", PodUID: "u1", Phase: v1alpha1.SurgeFailed, Since: metav1.NewTime(now)}}
			return nd
		}()},
		want: []string{
			"pod shop/web-1", "the API server refused its replacement, so the pod stays", "exceeded quota: pods",
			"kubectl describe resourcequota -n shop", "vacate manifests surge | kubectl apply -f -", "controller.surge: true",
			"vacate.dev/surge=false", "tries again every 30s",
		},
	}}
}

// drainExplainCases are what holds the drain itself: it failed, its policy
// is missing, a NoExecute trigger taint; and a drained node nothing holds.
func drainExplainCases() []explainCase {
	failed := stuck()
	failed.Status.Phase = v1alpha1.PhaseFailed
	failed.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionDrained, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonDrainTimeout, Message: "the drain did not finish within 10m0s"}}
	noPolicy := stuck()
	noPolicy.Status.Phase = v1alpha1.PhasePending
	noPolicy.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonPolicyNotFound, Message: `DrainPolicy "strict" named by spec.policyName does not exist`}}
	return []explainCase{{
		name: "a failed drain says how to start again",
		in:   Input{Drain: failed},
		want: []string{"nodedrain/n1", "why:  the drain did not finish within 10m0s", "'vacate cancel n1' and request it again"},
	}, {
		name: "a missing policy",
		in:   Input{Drain: noPolicy},
		want: []string{`why:  not admitted: DrainPolicy "strict" named by spec.policyName does not exist`, "create that DrainPolicy, or clear spec.policyName"},
	}, {
		name: "a NoExecute trigger taint is explained with what to use instead",
		in: Input{Drain: func() *v1alpha1.NodeDrain {
			nd := stuck()
			nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionNoExecuteTaint, Status: metav1.ConditionTrue,
				Reason: v1alpha1.ReasonNoExecuteTaint, Message: "node n1 has the taint vacate.dev/drain with effect NoExecute: ..."}}
			return nd
		}()},
		want: []string{"node/n1", "why:  node n1 has the taint vacate.dev/drain with effect NoExecute",
			"do:   replace the taint with one of effect NoSchedule", "kubectl taint node n1 vacate.dev/drain:NoExecute- vacate.dev/drain:NoSchedule"},
	}, {
		name: "nothing holds a drained node",
		in:   Input{Drain: func() *v1alpha1.NodeDrain { nd := stuck(); nd.Status.Phase = v1alpha1.PhaseDrained; return nd }()},
		want: []string{"Nothing holds it: the node is drained."},
	}}
}

// TestExplainEvacuations: pods held by a provider's evacuation or by their
// own HTTP hook are explained with who is waited for and what to do.
func TestExplainEvacuations(t *testing.T) {
	nd := stuck(
		v1alpha1.Blocker{Pod: "shop/store-0", Reason: v1alpha1.BlockerEvacuation, Holder: "Evacuation n1.replicated-volume",
			Detail: "provider replicated-volume is stale: no heartbeat for 2m0s (timeout 1m0s)", Since: metav1.NewTime(now.Add(-2 * time.Minute))},
		v1alpha1.Blocker{Pod: "shop/broker-0", Reason: v1alpha1.BlockerHTTPHook, Holder: "HTTP hook of pod shop/broker-0",
			Detail: `HTTP hook http://127.64.0.2:7070/evacuate: last call: HTTP 500: "disk full"`, Since: metav1.NewTime(now.Add(-time.Minute))},
	)
	var out bytes.Buffer
	if err := Explain(Input{Drain: nd, Now: now}).Write(&out, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"why:  waiting for EvacuationProvider replicated-volume to move its data off n1: provider replicated-volume is stale",
		"kubectl get evacuation n1.replicated-volume",
		"why:  waiting for the pod's own evacuation hook to answer Completed: HTTP hook http://127.64.0.2:7070/evacuate: last call: HTTP 500",
		"kubectl logs -n shop broker-0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExplainSaysWhoMayCallAHook: a hook that does not say it verified
// vacate-controller's token is named as open to any caller; one that
// refuses the token is told apart from an app that is slow.
func TestExplainSaysWhoMayCallAHook(t *testing.T) {
	hookBlocker := func(pod, detail string) v1alpha1.Blocker {
		return v1alpha1.Blocker{Pod: pod, Reason: v1alpha1.BlockerHTTPHook, Holder: "HTTP hook of pod " + pod, Detail: detail, Since: metav1.NewTime(now.Add(-time.Minute))}
	}
	nd := stuck(
		hookBlocker("shop/open-0", "HTTP hook http://10.0.0.1:7070/evacuate: InProgress: moving"),
		hookBlocker("shop/checked-0", "HTTP hook http://10.0.0.2:7070/evacuate: InProgress: moving"),
		hookBlocker("shop/refuses-0", `HTTP hook http://10.0.0.3:7070/evacuate: last call: POST http://10.0.0.3:7070/evacuate: HTTP 403: "caller system:serviceaccount:vacate-system:vacate-controller is not trusted"`),
	)
	nd.Status.Hooks = []v1alpha1.HookStatus{
		{Name: "pod/shop/open-0", Phase: "InProgress", CallerVerified: new(false)},
		{Name: "pod/shop/checked-0", Phase: "InProgress", CallerVerified: new(true)},
	}
	var out bytes.Buffer
	if err := Explain(Input{Drain: nd, Now: now}).Write(&out, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"InProgress: moving; the hook does not say that it checks who calls it: any pod that reaches it may start or cancel its evacuation",
		"InProgress: moving; the hook verifies that vacate-controller calls it",
		"the hook refuses vacate-controller's token: check the callers it trusts",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExplainEndpoints: an endpoint-aware pod out of service, waiting for
// its EndpointSlices, is explained as such, with what vacate waits for.
func TestExplainEndpoints(t *testing.T) {
	nd := stuck(v1alpha1.Blocker{Pod: "shop/web-1", Reason: v1alpha1.BlockerEndpoints,
		Detail: "out of service since 2026-11-23T05:00:00Z; EndpointSlice(s) shop/web-x7k2p still show it ready", Since: metav1.NewTime(now.Add(-3 * time.Second))})
	var out bytes.Buffer
	if err := Explain(Input{Drain: nd, Now: now}).Write(&out, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"pod shop/web-1",
		"out of service (readiness gate vacate.dev/serving False), leaving its Services before its eviction: out of service since 2026-11-23T05:00:00Z; EndpointSlice(s) shop/web-x7k2p still show it ready",
		"endpoints.settleTime",
		"kubectl get endpointslices -n shop",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explain lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDeadline: a drain whose machine goes at a deadline says what will
// not make it: blocked pods, a drain not admitted yet, a pace too slow for
// the time left; a drain on pace, or ended, says nothing about it.
func TestDeadline(t *testing.T) {
	admitted := []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAdmitted}}
	withDeadline := func(in time.Duration, blockers ...v1alpha1.Blocker) *v1alpha1.NodeDrain {
		nd := stuck(blockers...)
		nd.Status.Deadline = &v1alpha1.DrainDeadline{Time: metav1.NewTime(now.Add(in)), Requester: "agent:aws-spot"}
		nd.Status.Conditions = admitted
		nd.Status.StartTime = &metav1.Time{Time: now.Add(-time.Minute)} // 2 evicted in 1m, 2 remaining
		return nd
	}
	slow := withDeadline(30 * time.Second)
	onPace := withDeadline(5 * time.Minute)
	queued := withDeadline(5 * time.Minute)
	queued.Status.Conditions = nil
	passed := withDeadline(-10 * time.Second)
	drained := withDeadline(time.Minute)
	drained.Status.Phase = v1alpha1.PhaseDrained
	for _, tc := range []struct {
		name string
		nd   *v1alpha1.NodeDrain
		want []string // in the deadline's finding; none: no finding
	}{
		{"blocked", withDeadline(2*time.Minute, pdbBlocker("shop/web-1", "shop/web")),
			[]string{"the machine goes at 2026-11-22T15:02:00Z (the deadline of agent:aws-spot, in 2m0s)", "1 blocked pod(s) will not leave in time"}},
		{"too slow", slow, []string{"in 30s", "at the pace so far (2 pod(s) in 1m0s) the 2 remaining need about 1m0s"}},
		{"not admitted", queued, []string{"the drain is not admitted yet"}},
		{"passed", passed, []string{"passed 10s ago"}},
		{"on pace", onPace, nil},
		{"drained", drained, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Explain(Input{Drain: tc.nd, Now: now})
			var found *Finding
			for i, f := range e.Findings {
				if strings.Contains(f.Cause, "the machine goes at") {
					found = &e.Findings[i]
				}
			}
			if tc.want == nil {
				if found != nil {
					t.Fatalf("finding %+v, want none", *found)
				}
				return
			}
			if found == nil {
				t.Fatalf("no deadline finding in %+v", e.Findings)
			}
			for _, w := range tc.want {
				if !strings.Contains(found.Cause, w) {
					t.Errorf("cause %q lacks %q", found.Cause, w)
				}
			}
			if !strings.Contains(found.Fix, "timeouts.onTimeout") || !strings.Contains(e.State, "deadline 2026-11-22T") {
				t.Errorf("fix %q, state %q: want what happens at the deadline and the deadline in the state", found.Fix, e.State)
			}
		})
	}
}

// TestRunningAgainAndUnreportedProviders (issue 23): a drain that ended and
// runs again says why; an Evacuation of the drain whose provider names no
// reporter is a warning with what to set; one with a reporter, or of
// another drain, is not.
func TestRunningAgainAndUnreportedProviders(t *testing.T) {
	nd := stuck()
	nd.UID = "drain-uid"
	nd.Status.Run = &v1alpha1.DrainRun{Reason: v1alpha1.ReasonPodsArrived, Message: "1 pod(s) that must leave turned up on the node after it was Drained: shop/late"}
	evs := []v1alpha1.Evacuation{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1.volumes-1"}, Spec: v1alpha1.EvacuationSpec{NodeName: "n1", Provider: "volumes", DrainUID: "drain-uid"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n1.broker-2"}, Spec: v1alpha1.EvacuationSpec{NodeName: "n1", Provider: "broker", DrainUID: "drain-uid",
			Reporter: "system:serviceaccount:queues:broker"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n1.old-3"}, Spec: v1alpha1.EvacuationSpec{NodeName: "n1", Provider: "old", DrainUID: "earlier-drain"}},
	}
	e := Explain(Input{Drain: nd, Evacuations: evs, Now: now})
	var again, unreported []Finding
	for _, f := range e.Findings {
		switch {
		case strings.Contains(f.Cause, "runs again (PodsArrived)"):
			again = append(again, f)
		case strings.Contains(f.Cause, "names no reporter"):
			unreported = append(unreported, f)
		}
	}
	if len(again) != 1 || !strings.Contains(again[0].Cause, "shop/late") {
		t.Errorf("running-again findings %+v, want one naming shop/late", again)
	}
	if len(unreported) != 1 || unreported[0].Subject != "evacuation/n1.volumes-1" || !strings.Contains(unreported[0].Fix, "spec.reporter of EvacuationProvider volumes") {
		t.Errorf("unreported findings %+v, want one for volumes saying what to set", unreported)
	}
	nd.Status.Phase = v1alpha1.PhaseDrained
	for _, f := range Explain(Input{Drain: nd, Evacuations: evs, Now: now}).Findings {
		if strings.Contains(f.Cause, "names no reporter") || strings.Contains(f.Cause, "runs again") {
			t.Errorf("an ended drain still warns: %+v", f)
		}
	}
}

// TestProviderOfAnEvacuationName: the provider behind an Evacuation's name,
// read from the Evacuation, or from the name with its hash, or from a name
// of an older version (no hash).
func TestProviderOfAnEvacuationName(t *testing.T) {
	named := v1alpha1.EvacuationName("n.1", "vol-store")
	for _, c := range []struct {
		name string
		evs  []v1alpha1.Evacuation
		want string
	}{
		{named, nil, "vol-store"},
		{"n.1.vol-store", nil, "vol-store"},
		{named, []v1alpha1.Evacuation{{ObjectMeta: metav1.ObjectMeta{Name: named}, Spec: v1alpha1.EvacuationSpec{Provider: "from-spec"}}}, "from-spec"},
	} {
		if got := providerOf(c.name, "n.1", c.evs); got != c.want {
			t.Errorf("providerOf(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}
