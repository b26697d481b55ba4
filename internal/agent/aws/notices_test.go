package aws

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/dev/doubles/reports"
)

// maintenanceNotices maps a scheduled events answer read at now, as a
// source that never saw it before.
func maintenanceNotices(body []byte, now time.Time) ([]agent.Notice, error) {
	return (&scheduledEvents{}).notices(body, now)
}

// beforeEvents is a clock before every event of these tests.
var beforeEvents = time.Date(2029, 12, 1, 0, 0, 0, 0, time.UTC)

// TestMaintenanceNoticesPicksEarliestActive: of several events, only active
// ones count, and the one whose deadline comes first is the notice.
func TestMaintenanceNoticesPicksEarliestActive(t *testing.T) {
	body := `[
	{"Code": "system-reboot", "Description": "done", "State": "completed", "EventId": "e-done",
	 "NotBefore": "1 Jan 2030 00:00:00 GMT", "NotAfter": "2 Jan 2030 00:00:00 GMT"},
	{"Code": "instance-stop", "Description": "later", "State": "active", "EventId": "e-later",
	 "NotBefore": "21 Jan 2030 09:00:43 GMT", "NotAfter": "22 Jan 2030 09:00:43 GMT"},
	{"Code": "system-maintenance", "Description": "[Canceled] sooner", "State": "canceled", "EventId": "e-canceled",
	 "NotBefore": "3 Jan 2030 00:00:00 GMT", "NotAfter": "4 Jan 2030 00:00:00 GMT"},
	{"Code": "instance-reboot", "Description": "first", "State": "active", "EventId": "e-first",
	 "NotBefore": "10 Jan 2030 08:30:00 GMT", "NotAfter": "10 Jan 2030 10:30:00 GMT"}
]`
	got, err := maintenanceNotices([]byte(body), beforeEvents)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.Notice{{
		Source: SourceMaintenance, ID: "e-first", Mode: v1alpha1.ModeMaintenance,
		Deadline: time.Date(2030, 1, 10, 8, 30, 0, 0, time.UTC),
		Reason:   "AWS scheduled event instance-reboot (e-first) not before 2030-01-10T08:30:00Z: first",
	}}
	if !agent.SameNotices(got, want) {
		t.Errorf("notices = %s, want %s", reports.Describe([][]agent.Notice{got}), reports.Describe([][]agent.Notice{want}))
	}

	if got, err := maintenanceNotices([]byte(`[]`), beforeEvents); err != nil || len(got) != 0 {
		t.Errorf("no events: notices %v, error %v; want none", got, err)
	}

	// On 10 Jan at 09:00 e-first's window is open until 10:30, and e-due, a
	// retirement, was due at 08:00: the due event's deadline (now and two
	// minutes) comes first, though it started later than e-first.
	now := time.Date(2030, 1, 10, 9, 0, 0, 0, time.UTC)
	body = `[
	{"Code": "instance-reboot", "Description": "first", "State": "active", "EventId": "e-first",
	 "NotBefore": "10 Jan 2030 08:30:00 GMT", "NotAfter": "10 Jan 2030 10:30:00 GMT"},
	{"Code": "instance-retirement", "Description": "due", "State": "active", "EventId": "e-due",
	 "NotBefore": "10 Jan 2030 08:45:00 GMT"}
]`
	got, err = maintenanceNotices([]byte(body), now)
	if err != nil {
		t.Fatal(err)
	}
	want = []agent.Notice{{
		Source: SourceMaintenance, ID: "e-due", Mode: v1alpha1.ModeDecommission, Deadline: now.Add(OverdueMargin),
		Reason: "AWS scheduled event instance-retirement (e-due) was due at 2030-01-10T08:45:00Z and may happen at any moment: due",
	}}
	if !agent.SameNotices(got, want) {
		t.Errorf("notices = %s, want %s", reports.Describe([][]agent.Notice{got}), reports.Describe([][]agent.Notice{want}))
	}
}

// TestDueEventKeepsItsDeadline: the deadline given to an event that is due
// stays while it is active, however late the source reads it again; an
// event that leaves and comes back is new.
func TestDueEventKeepsItsDeadline(t *testing.T) {
	body := []byte(`[{"Code": "instance-stop", "Description": "stop", "State": "active", "EventId": "e-stop",
	 "NotBefore": "10 Jan 2030 08:00:00 GMT"}]`)
	seen := time.Date(2030, 1, 10, 9, 0, 0, 0, time.UTC)
	s := &scheduledEvents{}
	for i, now := range []time.Time{seen, seen.Add(time.Minute), seen.Add(time.Hour)} {
		got, err := s.notices(body, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got[0].Deadline.Equal(seen.Add(OverdueMargin)) {
			t.Errorf("read %d at %s: notices %s, want the deadline %s", i, now, reports.Describe([][]agent.Notice{got}), seen.Add(OverdueMargin))
		}
	}
	if got, err := s.notices([]byte(`[]`), seen.Add(2*time.Hour)); err != nil || len(got) != 0 {
		t.Fatalf("no events: notices %v, error %v; want none", got, err)
	}
	back := seen.Add(3 * time.Hour)
	if got, err := s.notices(body, back); err != nil || len(got) != 1 || !got[0].Deadline.Equal(back.Add(OverdueMargin)) {
		t.Errorf("the event back: notices %v, error %v; want the deadline %s", got, err, back.Add(OverdueMargin))
	}
}

func TestEventMode(t *testing.T) {
	for code, want := range map[string]v1alpha1.DrainMode{
		"instance-reboot":     v1alpha1.ModeMaintenance,
		"system-reboot":       v1alpha1.ModeMaintenance,
		"system-maintenance":  v1alpha1.ModeMaintenance,
		"instance-retirement": v1alpha1.ModeDecommission,
		"instance-stop":       v1alpha1.ModeDecommission,
		"some-future-code":    v1alpha1.ModeDecommission,
	} {
		if got := eventMode(code); got != want {
			t.Errorf("eventMode(%q) = %s, want %s", code, got, want)
		}
	}
}

func TestASGNotices(t *testing.T) {
	for state, want := range map[string]bool{
		"InService":         false,
		"Pending":           false,
		"Warmed:Running":    false,
		"Warmed:Stopped":    false,
		"Terminated":        true,
		"Terminated\n":      true,
		"Warmed:Terminated": true,
	} {
		got, err := asgNotices([]byte(state))
		if err != nil {
			t.Fatal(err)
		}
		if (len(got) == 1) != want || len(got) > 1 {
			t.Errorf("state %q: notices %+v, want a notice: %v", state, got, want)
		}
	}
}

// TestMalformedAnswersAreErrors: an answer the source cannot read is an
// error (the path keeps its last state), never a notice or none.
func TestMalformedAnswersAreErrors(t *testing.T) {
	scheduled := func(b []byte) ([]agent.Notice, error) { return maintenanceNotices(b, beforeEvents) }
	for _, tc := range []struct {
		name  string
		parse func([]byte) ([]agent.Notice, error)
		body  string
	}{
		{"spot: truncated", spotNotices, `{"action": "terminate"`},
		{"spot: no action", spotNotices, `{"time": "2030-01-02T03:04:05Z"}`},
		{"spot: bad time", spotNotices, `{"action": "terminate", "time": "soon"}`},
		{"rebalance: not JSON", func(b []byte) ([]agent.Notice, error) { return rebalanceNotices(b, false) }, `<html>`},
		{"rebalance: bad time", func(b []byte) ([]agent.Notice, error) { return rebalanceNotices(b, false) }, `{"noticeTime": ""}`},
		{"scheduled: an object", scheduled, `{"Code": "system-reboot"}`},
		{"scheduled: bad NotBefore", scheduled,
			`[{"Code": "system-reboot", "State": "active", "EventId": "e", "NotBefore": "2030-01-01T00:00:00Z"}]`},
		{"scheduled: bad NotAfter", scheduled,
			`[{"Code": "system-reboot", "State": "active", "EventId": "e", "NotBefore": "1 Jan 2030 00:00:00 GMT", "NotAfter": "soon"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.parse([]byte(tc.body)); err == nil {
				t.Errorf("notices %+v and no error, want an error", got)
			}
		})
	}
}

func TestNewValidatesOptions(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.endpoint != DefaultEndpoint || s.opts.Interval != DefaultInterval || s.opts.TokenTTL != DefaultTokenTTL {
		t.Errorf("defaults: endpoint %q, interval %s, token TTL %s", s.endpoint, s.opts.Interval, s.opts.TokenTTL)
	}
	if tr, ok := s.opts.Client.Transport.(*http.Transport); !ok || tr.Proxy != nil {
		t.Error("the default client may go through a proxy; the metadata service is link-local")
	}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"endpoint without scheme", Options{Endpoint: "169.254.169.254"}, "not an http(s) URL"},
		{"negative interval", Options{Interval: -time.Second}, "negative"},
		{"token TTL under a second", Options{TokenTTL: 500 * time.Millisecond}, "whole number of seconds"},
		{"token TTL over 6h", Options{TokenTTL: 7 * time.Hour}, "whole number of seconds"},
		{"token TTL with a fraction", Options{TokenTTL: 1500 * time.Millisecond}, "whole number of seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
