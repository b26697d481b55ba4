package nodedrain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/schedule"
)

// want is a condition a case expects: its status and reason, or absent.
type want struct {
	status metav1.ConditionStatus
	reason string
}

var absent = want{}

// cond is a condition as a drain had it before the pass.
func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: "before"}
}

var (
	statusNow    = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	statusDrain  = &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "d1"}, Spec: v1alpha1.NodeDrainSpec{NodeName: "n1"}}
	cordonedByUs = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{
		v1alpha1.AnnotationCordonedBy: v1alpha1.CordonedByValue(statusDrain)}}, Spec: corev1.NodeSpec{Unschedulable: true}}
	cordonedByOthers = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	tainted          = func() *corev1.Node {
		n := cordonedByUs.DeepCopy()
		n.Spec.Taints = []corev1.Taint{{Key: v1alpha1.TaintDrain, Effect: corev1.TaintEffectNoExecute}}
		return n
	}()
	admittedAndRunning = []metav1.Condition{
		cond(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted),
		cond(v1alpha1.ConditionCordoned, metav1.ConditionTrue, v1alpha1.ReasonCordoned),
		cond(v1alpha1.ConditionEvacuated, metav1.ConditionTrue, v1alpha1.ReasonNoEvacuations),
		cond(v1alpha1.ConditionPodsEvicted, metav1.ConditionFalse, v1alpha1.ReasonEvicting),
		cond(v1alpha1.ConditionBlocked, metav1.ConditionTrue, v1alpha1.ReasonBlocked),
		cond(v1alpha1.ConditionDrained, metav1.ConditionFalse, v1alpha1.ReasonDrainTimeout),
		cond(v1alpha1.ConditionNoExecuteTaint, metav1.ConditionTrue, v1alpha1.ReasonNoExecuteTaint),
	}
	statusBlockers = []podBlocker{{Blocker: v1alpha1.Blocker{Pod: "shop/web-1", Reason: v1alpha1.BlockerPDB}}}
)

// statusCases start from the status a drain had before the pass (phase,
// conditions), with what the pass found, and say what setStatus must make
// of it: the phase, conditions (status and reason, or absent) and words of
// their messages.
var statusCases = []struct {
	name      string
	phase     v1alpha1.DrainPhase
	conds     []metav1.Condition
	node      *corev1.Node
	found     facts
	wantPhase v1alpha1.DrainPhase
	want      map[string]want
	message   map[string]string
}{{
	name: "a new drain waits for admission, its node cordoned by admission", node: cordonedByUs,
	conds: []metav1.Condition{cond(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, schedule.WaitingForSlot)},
	found: facts{waiting: true}, wantPhase: v1alpha1.PhasePending,
	want: map[string]want{v1alpha1.ConditionCordoned: {metav1.ConditionTrue, v1alpha1.ReasonCordoned}},
}, {
	name: "a drain waiting for its window reports no cordon", phase: v1alpha1.PhasePending, node: cordonedByUs,
	conds: []metav1.Condition{cond(v1alpha1.ConditionAdmitted, metav1.ConditionFalse, schedule.OutsideWindow),
		cond(v1alpha1.ConditionCordoned, metav1.ConditionTrue, v1alpha1.ReasonCordoned)},
	found: facts{waiting: true}, wantPhase: v1alpha1.PhasePending,
	want: map[string]want{v1alpha1.ConditionCordoned: absent},
}, {
	name: "a drain no longer admitted keeps the phase it reached", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found: facts{waiting: true}, wantPhase: v1alpha1.PhaseEvicting,
}, {
	name: "cordoned by someone else", phase: v1alpha1.PhasePending, node: cordonedByOthers,
	found: facts{cordoned: true}, wantPhase: v1alpha1.PhaseCordoned,
	want: map[string]want{v1alpha1.ConditionCordoned: {metav1.ConditionTrue, v1alpha1.ReasonAlreadyCordoned}},
}, {
	name: "the cordon stage does not take an evicting drain back", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found: facts{cordoned: true}, wantPhase: v1alpha1.PhaseEvicting,
}, {
	name: "evacuations before eviction not Completed", phase: v1alpha1.PhaseCordoned, node: cordonedByUs,
	found:     facts{cordoned: true, evacuations: &evacuationCounts{reported: 2, before: 2, completed: 1}},
	wantPhase: v1alpha1.PhaseEvacuating,
	want:      map[string]want{v1alpha1.ConditionEvacuated: {metav1.ConditionFalse, v1alpha1.ReasonEvacuating}},
	message:   map[string]string{v1alpha1.ConditionEvacuated: "1 of 2 evacuation(s) before eviction Completed"},
}, {
	name: "pods left, one blocked, past a deadline", phase: v1alpha1.PhaseCordoned, node: cordonedByUs,
	found: facts{cordoned: true, evacuations: &evacuationCounts{}, podsLeft: true, evicting: &podCounts{
		summary: "1 to evict", blockers: statusBlockers,
		pastDeadline: &v1alpha1.DrainDeadline{Requester: "ops", Time: metav1.NewTime(statusNow.Add(-time.Minute))}}},
	wantPhase: v1alpha1.PhaseEvicting,
	want: map[string]want{v1alpha1.ConditionEvacuated: {metav1.ConditionTrue, v1alpha1.ReasonNoEvacuations},
		v1alpha1.ConditionPodsEvicted: {metav1.ConditionFalse, v1alpha1.ReasonEvicting},
		v1alpha1.ConditionBlocked:     {metav1.ConditionTrue, v1alpha1.ReasonBlocked}},
	message: map[string]string{v1alpha1.ConditionBlocked: "past the deadline of requester ops", v1alpha1.ConditionPodsEvicted: "1 to evict"},
}, {
	name: "pods left that wait for their evacuation", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found:     facts{cordoned: true, podsLeft: true, podsHeld: true, evicting: &podCounts{}},
	wantPhase: v1alpha1.PhaseEvacuating,
	want:      map[string]want{v1alpha1.ConditionBlocked: {metav1.ConditionFalse, v1alpha1.ReasonNotBlocked}},
}, {
	name: "every pod left, evacuations after eviction wait", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found: facts{cordoned: true, evacuations: &evacuationCounts{reported: 1, pending: []string{"ev-1: InProgress"}},
		evicting: &podCounts{completed: true}, afterEviction: true},
	wantPhase: v1alpha1.PhaseEvacuating,
	want: map[string]want{v1alpha1.ConditionEvacuated: {metav1.ConditionFalse, v1alpha1.ReasonWaitingAfterEvict},
		v1alpha1.ConditionPodsEvicted: {metav1.ConditionTrue, v1alpha1.ReasonAllEvicted}},
}, {
	name: "Drained", phase: v1alpha1.PhaseEvicting, node: cordonedByUs, conds: admittedAndRunning,
	found:     facts{cordoned: true, evicting: &podCounts{completed: true}, drained: &drainedCounts{evicted: 3, took: 2 * time.Minute}},
	wantPhase: v1alpha1.PhaseDrained,
	want:      map[string]want{v1alpha1.ConditionDrained: {metav1.ConditionTrue, v1alpha1.ReasonDrained}},
	message:   map[string]string{v1alpha1.ConditionDrained: "3 pod(s) left the node in 2m0s"},
}, {
	name: "ForceDelete deleting after a timeout", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found: facts{evicting: &podCounts{blockers: statusBlockers},
		overdue: &ending{v1alpha1.ReasonDrainTimeout, "the drain did not finish; remaining pods deleted"}},
	wantPhase: v1alpha1.PhaseEvicting,
	want:      map[string]want{v1alpha1.ConditionBlocked: {metav1.ConditionTrue, v1alpha1.ReasonDrainTimeout}},
}, {
	name: "Failed", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found:     facts{evicting: &podCounts{blockers: statusBlockers}, failed: &ending{v1alpha1.ReasonDrainTimeout, "out of time"}},
	wantPhase: v1alpha1.PhaseFailed,
	want: map[string]want{v1alpha1.ConditionBlocked: {metav1.ConditionTrue, v1alpha1.ReasonDrainTimeout},
		v1alpha1.ConditionDrained: {metav1.ConditionFalse, v1alpha1.ReasonDrainTimeout}},
}, {
	name: "an ended drain runs again", phase: v1alpha1.PhaseFailed, node: cordonedByUs, conds: admittedAndRunning,
	found:     facts{again: &ending{v1alpha1.ReasonModeRaised, "running again after it was Failed: mode raised"}, waiting: true},
	wantPhase: v1alpha1.PhasePending,
	// Admitted is admission's: left as it was (the run counts anew: runAgain).
	want: map[string]want{v1alpha1.ConditionAdmitted: {metav1.ConditionTrue, v1alpha1.ReasonAdmitted}, v1alpha1.ConditionBlocked: absent,
		v1alpha1.ConditionDrained: {metav1.ConditionFalse, v1alpha1.ReasonModeRaised}},
}, {
	name: "the node is missing", phase: v1alpha1.PhaseEvicting, conds: admittedAndRunning,
	found:     facts{held: true, missing: true},
	wantPhase: v1alpha1.PhasePending,
	want: map[string]want{v1alpha1.ConditionCordoned: {metav1.ConditionFalse, v1alpha1.ReasonNodeNotFound},
		v1alpha1.ConditionBlocked: absent},
}, {
	name: "the node was replaced", phase: v1alpha1.PhaseEvicting, node: cordonedByOthers, conds: admittedAndRunning,
	found:     facts{held: true, replaced: true},
	wantPhase: v1alpha1.PhasePending,
	want: map[string]want{v1alpha1.ConditionCordoned: absent, v1alpha1.ConditionEvacuated: absent,
		v1alpha1.ConditionPodsEvicted: absent, v1alpha1.ConditionDrained: absent, v1alpha1.ConditionBlocked: absent,
		v1alpha1.ConditionAdmitted: {metav1.ConditionTrue, v1alpha1.ReasonAdmitted}},
}, {
	name: "the undo waits for the providers", phase: v1alpha1.PhaseEvicting, node: cordonedByUs, conds: admittedAndRunning,
	found:     facts{undoing: true, cancelling: "waiting for the providers to undo their evacuations"},
	wantPhase: v1alpha1.PhaseRestoring,
	want:      map[string]want{v1alpha1.ConditionEvacuated: {metav1.ConditionFalse, v1alpha1.ReasonCancelling}},
}, {
	name: "the undo is done", phase: v1alpha1.PhaseRestoring, node: cordonedByUs, conds: admittedAndRunning,
	found:     facts{undoing: true, restored: "no requester is left; vacate undid its changes"},
	wantPhase: v1alpha1.PhasePending,
	want: map[string]want{v1alpha1.ConditionCordoned: {metav1.ConditionFalse, v1alpha1.ReasonRestored},
		v1alpha1.ConditionAdmitted: {metav1.ConditionTrue, v1alpha1.ReasonAdmitted}, // admission's: left as it was
		v1alpha1.ConditionBlocked:  absent, v1alpha1.ConditionDrained: absent, v1alpha1.ConditionNoExecuteTaint: absent},
}, {
	name: "a NoExecute trigger taint", phase: v1alpha1.PhaseEvicting, node: tainted,
	found:     facts{node: tainted, noExecute: true},
	wantPhase: v1alpha1.PhaseEvicting,
	want:      map[string]want{v1alpha1.ConditionNoExecuteTaint: {metav1.ConditionTrue, v1alpha1.ReasonNoExecuteTaint}},
}, {
	name: "the NoExecute trigger taint is gone", phase: v1alpha1.PhaseEvicting, node: cordonedByUs, conds: admittedAndRunning,
	found:     facts{node: cordonedByUs, noExecute: true},
	wantPhase: v1alpha1.PhaseEvicting,
	want:      map[string]want{v1alpha1.ConditionNoExecuteTaint: {metav1.ConditionFalse, v1alpha1.ReasonNoExecuteTaintGone}},
}, {
	name: "a node that never had the taint gets no condition", phase: v1alpha1.PhaseEvicting, node: cordonedByUs,
	found:     facts{node: cordonedByUs, noExecute: true},
	wantPhase: v1alpha1.PhaseEvicting,
	want:      map[string]want{v1alpha1.ConditionNoExecuteTaint: absent},
}, {
	name: "a pass that found nothing changes nothing", phase: v1alpha1.PhaseEvicting, node: cordonedByUs, conds: admittedAndRunning,
	wantPhase: v1alpha1.PhaseEvicting,
	want: map[string]want{v1alpha1.ConditionBlocked: {metav1.ConditionTrue, v1alpha1.ReasonBlocked},
		v1alpha1.ConditionDrained: {metav1.ConditionFalse, v1alpha1.ReasonDrainTimeout}},
	message: map[string]string{v1alpha1.ConditionBlocked: "before"},
}}

// TestStatusFollowsWhatThePassFound: setStatus derives every condition and
// the phase from the facts a pass recorded, and leaves alone what the pass
// did not reach (statusCases).
func TestStatusFollowsWhatThePassFound(t *testing.T) {
	for _, c := range statusCases {
		t.Run(c.name, func(t *testing.T) {
			nd := statusDrain.DeepCopy()
			nd.Status.Phase, nd.Status.Conditions = c.phase, append([]metav1.Condition(nil), c.conds...)
			s := &scope{drain: nd, node: c.node, now: statusNow, found: c.found}
			s.setStatus()
			if nd.Status.Phase != c.wantPhase {
				t.Errorf("phase %q, want %q", nd.Status.Phase, c.wantPhase)
			}
			for typ, w := range c.want {
				got := meta.FindStatusCondition(nd.Status.Conditions, typ)
				switch {
				case w == absent && got != nil:
					t.Errorf("%s = %s/%s, want absent", typ, got.Status, got.Reason)
				case w != absent && got == nil:
					t.Errorf("%s absent, want %s/%s", typ, w.status, w.reason)
				case w != absent && (got.Status != w.status || got.Reason != w.reason):
					t.Errorf("%s = %s/%s, want %s/%s", typ, got.Status, got.Reason, w.status, w.reason)
				}
			}
			for typ, sub := range c.message {
				if got := meta.FindStatusCondition(nd.Status.Conditions, typ); got == nil || !strings.Contains(got.Message, sub) {
					t.Errorf("%s message = %v, want it to say %q", typ, got, sub)
				}
			}
		})
	}
}

// TestPodCountsListTheBlockers: the counts never lose an evicted pod; the
// blockers are listed by pod, at most MaxBlockers with the rest counted; a
// blocker seen before keeps its since.
func TestPodCountsListTheBlockers(t *testing.T) {
	nd := statusDrain.DeepCopy()
	earlier := metav1.NewTime(statusNow.Add(-time.Hour))
	nd.Status.Total, nd.Status.Evicted = 10, 4
	nd.Status.Blockers = []v1alpha1.Blocker{{Pod: "shop/a", Reason: v1alpha1.BlockerPDB, Since: earlier}}
	var found []podBlocker
	for i := v1alpha1.MaxBlockers + 2; i > 0; i-- {
		found = append(found, podBlocker{Blocker: v1alpha1.Blocker{Pod: fmt.Sprintf("shop/p%03d", i), Reason: v1alpha1.BlockerPDB,
			Since: metav1.NewTime(statusNow)}, refused: i == 1})
	}
	found = append(found, podBlocker{Blocker: v1alpha1.Blocker{Pod: "shop/a", Reason: v1alpha1.BlockerPDB, Since: metav1.NewTime(statusNow)}, refused: true})
	s := &scope{drain: nd, now: statusNow, found: facts{evicting: &podCounts{remaining: 3, blockers: found}}}
	s.setStatus()
	st := nd.Status
	if st.Total != 10 || st.Evicted != 7 || st.Remaining != 3 || st.Progress != "7/10" {
		t.Errorf("counts total %d evicted %d remaining %d progress %q, want 10, 7, 3, 7/10", st.Total, st.Evicted, st.Remaining, st.Progress)
	}
	if want := int32(v1alpha1.MaxBlockers + 3); st.Blocked != want || len(st.Blockers) != v1alpha1.MaxBlockers || st.BlockersOmitted != 3 {
		t.Errorf("blocked %d, listed %d, omitted %d; want %d, %d, 3", st.Blocked, len(st.Blockers), st.BlockersOmitted, want, v1alpha1.MaxBlockers)
	}
	if first := st.Blockers[0]; first.Pod != "shop/a" || !first.Since.Equal(&earlier) {
		t.Errorf("first blocker %s since %s, want shop/a since %s (seen before)", first.Pod, first.Since, earlier)
	}
}

// TestPodsAreToldOncePerBlocker: a refusal by the API server is a Warning
// on the pod and a hold a Normal event, once per pod and blocker however
// many passes see it, beyond the MaxBlockers the status lists too; a pod
// waiting for its PDB's budget is no event; a blocker that went away and
// came back is told again.
func TestPodsAreToldOncePerBlocker(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Events: rec, blocked: newReasonGauge(metrics.PodsBlocked)}
	pod := func(i int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("p%03d", i), UID: types.UID(fmt.Sprint(i))}}
	}
	blocker := func(i int, reason string) v1alpha1.Blocker {
		return v1alpha1.Blocker{Pod: fmt.Sprintf("shop/p%03d", i), Reason: reason, Holder: "h", Detail: "d", Since: metav1.NewTime(statusNow)}
	}
	var found []podBlocker
	for i := 1; i <= v1alpha1.MaxBlockers+5; i++ { // waiting for their PDB's budget
		found = append(found, podBlocker{Blocker: blocker(i, v1alpha1.BlockerPDB), pod: pod(i)})
	}
	last := v1alpha1.MaxBlockers + 5
	found[0].refused = true                                                                                                    // refused by the API server
	found[last-1] = podBlocker{Blocker: blocker(last, v1alpha1.BlockerHTTPHook), pod: pod(last), hold: corev1.EventTypeNormal} // held, not listed
	pass := func(blockers []podBlocker) []string {
		s := &scope{drain: statusDrain.DeepCopy(), now: statusNow, found: facts{evicting: &podCounts{remaining: int32(len(blockers)), blockers: blockers}}}
		s.setStatus()
		r.reportPods(s)
		r.recordPodEvents(s)
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		return got
	}
	got := pass(found)
	if len(got) != 2 || !strings.HasPrefix(got[0], "Warning EvictionBlocked") || !strings.HasPrefix(got[1], "Normal EvictionHeld") {
		t.Fatalf("first pass: events %q, want a Warning EvictionBlocked (p001) and a Normal EvictionHeld (p%03d, not listed in the status)", got, last)
	}
	if got := pass(found); len(got) != 0 {
		t.Errorf("second pass, same blockers: events %q, want none", got)
	}
	if got := pass(found[1:]); len(got) != 0 { // p001's refusal went away
		t.Errorf("a blocker gone: events %q, want none", got)
	}
	if got := pass(found); len(got) != 1 || !strings.HasPrefix(got[0], "Warning EvictionBlocked") {
		t.Errorf("a refusal that came back: events %q, want it told again", got)
	}
}
