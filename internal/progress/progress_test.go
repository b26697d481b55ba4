package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)

func drain(node string, phase v1alpha1.DrainPhase, evicted, total int32, blockers ...v1alpha1.Blocker) *v1alpha1.NodeDrain {
	nd := &v1alpha1.NodeDrain{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       v1alpha1.NodeDrainSpec{NodeName: node, Requesters: []v1alpha1.Requester{{Name: "cli:test"}}},
		Status: v1alpha1.NodeDrainStatus{Phase: phase, Evicted: evicted, Total: total, Remaining: total - evicted,
			Blocked: int32(len(blockers)), Blockers: blockers, StartTime: &metav1.Time{Time: t0}},
	}
	if phase == v1alpha1.PhaseDrained {
		nd.Status.CompletionTime = &metav1.Time{Time: t0.Add(20 * time.Second)}
	}
	return nd
}

func pdbBlocker(pod string, since time.Time) v1alpha1.Blocker {
	return v1alpha1.Blocker{Pod: pod, Reason: "PodDisruptionBudget", Holder: "PodDisruptionBudget shop/db",
		Detail: "PodDisruptionBudget shop/db allows no disruption now", Since: metav1.Time{Time: since}}
}

func TestFrameShowsBarsBlockersAndETA(t *testing.T) {
	tr := NewTracker([]string{"node-1", "node-2"}, t0)
	frame := strings.Join(tr.Frame(t0, 0), "\n")
	if !strings.Contains(frame, "node-1 ["+strings.Repeat("░", barWidth)+"]") || !strings.Contains(frame, "requested") {
		t.Fatalf("before any NodeDrain is seen, want empty bars and 'requested':\n%s", frame)
	}

	tr.Observe(drain("node-1", v1alpha1.PhaseEvicting, 2, 8), t0.Add(4*time.Second))
	tr.Observe(drain("node-2", v1alpha1.PhaseEvicting, 1, 4, pdbBlocker("shop/db-0", t0.Add(time.Second))), t0.Add(4*time.Second))
	frame = strings.Join(tr.Frame(t0.Add(4*time.Second), 0), "\n")
	for _, want := range []string{
		"node-1 [" + strings.Repeat("█", 6) + strings.Repeat("░", 18) + "]     2/8  Evicting 4s",
		"blocked 3s: shop/db-0 held by PodDisruptionBudget shop/db: allows no disruption now",
		"ETA ~12s", // node-1: 2 pods in 4s, 6 left
	} {
		if !strings.Contains(frame, want) {
			t.Errorf("frame lacks %q:\n%s", want, frame)
		}
	}

	// Only blocked pods left on a node: no rate predicts when they go.
	tr.Observe(drain("node-2", v1alpha1.PhaseEvicting, 3, 4, pdbBlocker("shop/db-0", t0.Add(time.Second))), t0.Add(6*time.Second))
	if _, ok := tr.ETA(t0.Add(6 * time.Second)); ok {
		t.Error("ETA given while the only pod left is blocked")
	}

	// Lines are cut to the terminal's width, so a redraw never wraps.
	for _, l := range tr.Frame(t0.Add(6*time.Second), 40) {
		if n := len([]rune(l)); n > 40 {
			t.Errorf("line of %d cells in a 40-cell terminal: %q", n, l)
		}
	}
}

func TestLinesOnlyOnChange(t *testing.T) {
	tr := NewTracker([]string{"node-1"}, t0)
	l := NewLines()
	step := func(at time.Duration, nd *v1alpha1.NodeDrain) []string {
		if nd != nil {
			tr.Observe(nd, t0.Add(at))
		}
		return l.Changes(tr, t0.Add(at))
	}
	if got := step(0, nil); len(got) != 0 {
		t.Fatalf("lines before anything was seen: %q", got)
	}
	got := step(time.Second, drain("node-1", v1alpha1.PhaseEvicting, 1, 3))
	if want := []string{"2026-11-22T15:00:01Z node-1 Evicting 1/3"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := step(2*time.Second, drain("node-1", v1alpha1.PhaseEvicting, 1, 3)); len(got) != 0 {
		t.Fatalf("nothing changed but got %q", got)
	}
	got = step(3*time.Second, drain("node-1", v1alpha1.PhaseEvicting, 2, 3, pdbBlocker("shop/db-0", t0)))
	want := []string{
		`2026-11-22T15:00:03Z node-1 Blocked shop/db-0 PodDisruptionBudget "PodDisruptionBudget shop/db" "PodDisruptionBudget shop/db allows no disruption now"`,
		"2026-11-22T15:00:03Z node-1 Evicting 2/3",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = step(20*time.Second, drain("node-1", v1alpha1.PhaseDrained, 3, 3))
	want = []string{
		"2026-11-22T15:00:20Z node-1 Unblocked shop/db-0 PodDisruptionBudget",
		`2026-11-22T15:00:20Z node-1 Drained 3/3 "in 20s"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !tr.Done() {
		t.Fatal("tracker not done after the only drain ended")
	}
}

// TestLinesShowEvacuationProgress: each change of an evacuation's phase or
// message is a line; an unchanged one is not repeated.
func TestLinesShowEvacuationProgress(t *testing.T) {
	tr := NewTracker([]string{"node-2"}, t0)
	l := NewLines()
	evac := func(at time.Duration, phase, msg string) []string {
		nd := drain("node-2", v1alpha1.PhaseEvacuating, 0, 1)
		nd.Status.Hooks = []v1alpha1.HookStatus{{Name: "node-2.volumes", Phase: phase, Message: msg}}
		tr.Observe(nd, t0.Add(at))
		return l.Changes(tr, t0.Add(at))
	}
	got := evac(time.Second, "InProgress", "1 of 3 copied")
	if len(got) != 2 || got[0] != `2026-11-22T15:00:01Z node-2 Evacuation node-2.volumes InProgress "1 of 3 copied"` {
		t.Fatalf("got %q", got)
	}
	if got := evac(2*time.Second, "InProgress", "1 of 3 copied"); len(got) != 0 {
		t.Fatalf("nothing changed but got %q", got)
	}
	if got := evac(3*time.Second, "Completed", "3 of 3 copied"); len(got) != 1 || !strings.Contains(got[0], `Evacuation node-2.volumes Completed "3 of 3 copied"`) {
		t.Fatalf("got %q", got)
	}
}

func TestSummaryAndReportRecordBlockersMet(t *testing.T) {
	tr := NewTracker([]string{"node-1", "node-2"}, t0)
	tr.Observe(drain("node-1", v1alpha1.PhaseEvicting, 1, 3, pdbBlocker("shop/db-0", t0.Add(2*time.Second))), t0.Add(3*time.Second))
	tr.Observe(drain("node-1", v1alpha1.PhaseEvicting, 2, 3, pdbBlocker("shop/db-0", t0.Add(2*time.Second))), t0.Add(12*time.Second))
	tr.Observe(drain("node-1", v1alpha1.PhaseDrained, 3, 3), t0.Add(20*time.Second))
	tr.Observe(drain("node-2", v1alpha1.PhaseEvicting, 0, 2), t0.Add(20*time.Second))

	var buf bytes.Buffer
	if err := tr.Summary(&buf, t0.Add(21*time.Second)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		// Held from its since (2s) until the observation that found it
		// gone (20s): the status need not change while a PDB holds.
		"node-1  Drained             3/3      20s   PodDisruptionBudget shop/db (1 pod(s), 18s)",
		"node-2  Running (Evicting)  0/2      21s   -",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	r := tr.Report(t0.Add(21 * time.Second))
	if len(r.Nodes) != 2 || r.Nodes[0].Result != "Drained" || len(r.Nodes[0].BlockersMet) != 1 ||
		r.Nodes[0].BlockersMet[0].HeldSeconds != 18 || r.Nodes[0].BlockersMet[0].Pods[0] != "shop/db-0" {
		t.Fatalf("report: %+v", r)
	}
}

func TestScreenRedrawsInPlace(t *testing.T) {
	var buf bytes.Buffer
	s := NewScreen(&buf)
	if err := s.Draw([]string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Draw([]string{"d"}); err != nil {
		t.Fatal(err)
	}
	want := "\r\x1b[2Ka\n\r\x1b[2Kb\n\r\x1b[2Kc\n" + // first frame
		"\x1b[3A\r\x1b[2Kd\n\r\x1b[2K\n\r\x1b[2K\n\x1b[2A" // up 3, d, clear 2 lines, back up 2
	if buf.String() != want {
		t.Fatalf("got %q\nwant %q", buf.String(), want)
	}
}

func TestFitCutAndGone(t *testing.T) {
	lines := []string{"a", "b", "c", "d", "e"}
	if got := Fit(lines, 10); len(got) != 5 {
		t.Errorf("Fit cut a frame that fits: %q", got)
	}
	got := Fit(lines, 4)
	if len(got) != 3 || got[2] != "... 3 more line(s): enlarge the terminal, or pipe the output for one line per change" {
		t.Errorf("Fit(5 lines, height 4) = %q", got)
	}
	if got := Cut("held: line one\nline two\x1b[2J", 0); got != "held: line one line two [2J" {
		t.Errorf("Cut left control characters: %q", got)
	}

	tr := NewTracker([]string{"gone-early", "drained", "running"}, t0)
	tr.Observe(drain("drained", v1alpha1.PhaseDrained, 2, 2), t0)
	tr.Observe(drain("running", v1alpha1.PhaseEvicting, 1, 2), t0)
	for _, n := range []string{"gone-early", "drained", "running"} {
		tr.Gone(n)
	}
	if n := tr.Node("gone-early"); !n.Cancelled || !n.Ended() {
		t.Error("a drain never seen and missing from a listing is not ended as cancelled")
	}
	if n := tr.Node("drained"); n.Cancelled || n.Result() != "Drained" {
		t.Errorf("a drained drain deleted afterwards reads %s", n.Result())
	}
	if n := tr.Node("running"); n.Result() != "Cancelled" {
		t.Errorf("a running drain that disappeared reads %s", n.Result())
	}
	if !tr.Done() {
		t.Error("tracker not done though every drain ended or is gone")
	}
}

func TestScreenResetDrawsBelow(t *testing.T) {
	var buf bytes.Buffer
	s := NewScreen(&buf)
	_ = s.Draw([]string{"a", "b"})
	s.Reset()
	buf.Reset()
	_ = s.Draw([]string{"c"})
	if got := buf.String(); got != "\r\x1b[2Kc\n" {
		t.Errorf("after Reset the frame is %q, want it drawn below without moving up", got)
	}
}
