package cli

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// TestStatusSaysRunningAgain (issue 23): a drain that ended and runs again
// shows why in its phase cell and, -o wide, in WHY; an ended drain or a
// first run shows neither.
func TestStatusSaysRunningAgain(t *testing.T) {
	nd := &v1alpha1.NodeDrain{Spec: v1alpha1.NodeDrainSpec{NodeName: "n1", Requesters: []v1alpha1.Requester{{Name: "cli:alice"}}}}
	nd.Status.Phase = v1alpha1.PhaseEvicting
	if got := phaseCell(nd); got != "Evicting" {
		t.Errorf("first run: phase cell %q", got)
	}
	nd.Status.Run = &v1alpha1.DrainRun{Reason: v1alpha1.ReasonPodsArrived, Message: "1 pod(s) that must leave turned up on the node after it was Drained: shop/late"}
	if got := phaseCell(nd); got != "Evicting (again: PodsArrived)" {
		t.Errorf("running again: phase cell %q", got)
	}
	if got := why(nd); !strings.HasPrefix(got, "running again: 1 pod(s)") {
		t.Errorf("running again: why %q", got)
	}
	nd.Status.Phase = v1alpha1.PhasePending
	nd.Status.QueuePosition = 1
	nd.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "WaitingForSlot"}}
	if got := phaseCell(nd); got != "Queued #1 WaitingForSlot (again: PodsArrived)" {
		t.Errorf("queued again: phase cell %q", got)
	}
	nd.Status.Phase, nd.Status.Conditions = v1alpha1.PhaseDrained, nil
	if got := phaseCell(nd); got != "Drained" {
		t.Errorf("ended: phase cell %q", got)
	}
}

// TestWatchRowsLineUp: under --watch each change is printed on its own by
// cli-runtime's table printer; the rows are padded so that their columns
// start where the listing's do (the listing reserves room for a queued
// phase).
func TestWatchRowsLineUp(t *testing.T) {
	var out strings.Builder
	o := &statusOptions{streams: Streams{Out: &out}, clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), watch: true}
	p, err := o.printer("", "", false)
	if err != nil {
		t.Fatal(err)
	}
	nd := func(name string, phase v1alpha1.DrainPhase, requester string) v1alpha1.NodeDrain {
		d := v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(990, 0))},
			Spec: v1alpha1.NodeDrainSpec{NodeName: name, Requesters: []v1alpha1.Requester{{Name: requester}}}}
		d.Status.Phase = phase
		return d
	}
	if err := p.list([]v1alpha1.NodeDrain{nd("n1", v1alpha1.PhaseDrained, "demo")}); err != nil {
		t.Fatal(err)
	}
	// A longer phase than any listed (a queued one), within the widths of
	// the listing.
	later := nd("n2", v1alpha1.PhasePending, "cli:bob")
	later.Status.QueuePosition = 3
	later.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "WaitingForPDBHeadroom"}}
	if err := p.row(&later); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed:\n%s", out.String())
	}
	header := lines[0]
	for _, col := range []string{"PHASE", "REQUESTERS", "AGE"} {
		at := strings.Index(header, col)
		for _, l := range lines[1:] {
			if at >= len(l) || l[at-1] != ' ' || l[at] == ' ' {
				t.Errorf("column %s starts at %d in the header, not in %q", col, at, l)
			}
		}
	}
	if strings.HasSuffix(lines[2], " ") {
		t.Errorf("trailing spaces: %q", lines[2])
	}
}

// TestStatusNoHeadersAndSortBy (issue 44): --no-headers prints rows only
// (the table, -o wide, custom-columns; "No drains" on the error stream);
// --sort-by orders by a JSONPath field as kubectl get does (numbers by
// value, times by time, drains without the field first) and refuses, as a
// usage error, an expression that does not parse, a field no drain has,
// and one that selects several values or an object.
func TestStatusNoHeadersAndSortBy(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(10000, 0))
	drain := func(name string, evicted int32, created int64, requesters ...string) v1alpha1.NodeDrain {
		d := v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(created, 0))},
			Spec: v1alpha1.NodeDrainSpec{NodeName: name}}
		for _, r := range requesters {
			d.Spec.Requesters = append(d.Spec.Requesters, v1alpha1.Requester{Name: r})
		}
		d.Status.Phase, d.Status.Evicted, d.Status.Total = v1alpha1.PhaseEvicting, evicted, 20
		return d
	}
	drains := func() []v1alpha1.NodeDrain {
		a, b, c := drain("a", 10, 300, "cli:x"), drain("b", 9, 100, "cli:y", "cli:z"), drain("c", 0, 200, "cli:x")
		c.Status.CompletionTime = &metav1.Time{Time: time.Unix(500, 0)}
		return []v1alpha1.NodeDrain{a, b, c}
	}
	print := func(format, arg string, noHeaders bool, sortBy string, list []v1alpha1.NodeDrain) (string, string, error) {
		t.Helper()
		var out, errOut strings.Builder
		o := &statusOptions{streams: Streams{Out: &out, Err: &errOut}, clock: clk, noHeaders: noHeaders}
		sorter, err := newDrainSorter(sortBy)
		if err != nil {
			return "", "", err
		}
		if err := sorter.sort(list); err != nil {
			return "", "", err
		}
		p, err := o.printer(format, arg, false)
		if err != nil {
			t.Fatal(err)
		}
		err = p.list(list)
		return out.String(), errOut.String(), err
	}
	names := func(out string) string {
		var first []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			first = append(first, strings.Fields(l)[0])
		}
		return strings.Join(first, " ")
	}
	for _, tc := range []struct {
		format, sortBy, want string
	}{
		{"", "", "a b c"},
		{formatWide, ".status.evicted", "c b a"}, // 9 before 10: numbers, not text
		{"", "{.metadata.creationTimestamp}", "b c a"},
		{"", ".status.completionTime", "a b c"}, // without it first, in their order
		{"", ".spec.requesters[0].name", "a c b"},
	} {
		out, _, err := print(tc.format, "", true, tc.sortBy, drains())
		if err != nil || strings.Contains(out, "NODE") || names(out) != tc.want {
			t.Errorf("-o %q --no-headers --sort-by %q: %v\n%s\nwant the rows %s only", tc.format, tc.sortBy, err, out, tc.want)
		}
	}
	out, _, _ := print("", "", false, "", drains())
	if !strings.HasPrefix(out, "NODE ") {
		t.Errorf("without --no-headers, no header:\n%s", out)
	}
	out, _, err := print(formatCustomColumns, "N:.metadata.name,E:.status.evicted", true, "", drains())
	if err != nil || regexp.MustCompile(`\s+`).ReplaceAllString(out, " ") != "a 10 b 9 c <none> " {
		t.Errorf("-o custom-columns --no-headers: %v %q", err, out)
	}
	out, errOut, err := print("", "", true, "", nil)
	if err != nil || out != "" || !strings.Contains(errOut, "No drains") {
		t.Errorf("no drains, --no-headers: %v stdout %q stderr %q; want nothing on stdout", err, out, errOut)
	}
	// The fields --sort-by completes to exist.
	full := drain("full", 3, 100, "cli:x")
	now := metav1.NewTime(time.Unix(200, 0))
	full.Spec.Mode, full.Status.Blocked, full.Status.QueuePosition = v1alpha1.ModeMaintenance, 1, 2
	full.Status.StartTime, full.Status.CompletionTime = &now, &now
	for _, f := range sortFields {
		s, err := newDrainSorter(f)
		if err != nil {
			t.Fatal(err)
		}
		if k, err := s.key(&full); err != nil || k == nil {
			t.Errorf("--sort-by completes to %s, which a drain with every field has not: %v %v", f, k, err)
		}
	}
	for _, tc := range []struct{ sortBy, want string }{
		{"{.status.evicted", `--sort-by "{.status.evicted" is no JSONPath expression`},
		{".status.evictd", `--sort-by ".status.evictd": no NodeDrain has this field`},
		{".spec.requesters[*].name", `selects 2 values of NodeDrain b, want one`},
		{".status", "selects an object or a list of NodeDrain a"},
	} {
		_, _, err := print("", "", false, tc.sortBy, drains())
		var ae argsError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--sort-by %q: %v; want a usage error with %q", tc.sortBy, err, tc.want)
		}
	}
}
