package aws

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/dev/doubles/awstest"
	"github.com/vacate-dev/vacate/internal/dev/doubles/reports"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// The mock's fixed answers: times set by flags, and its default event ID.
const (
	spotTime      = "2030-01-02T03:04:05Z"
	rebalanceTime = "2030-01-01T00:00:00Z"
	eventStart    = "2030-02-03T04:05:06Z"
	mockEventID   = "instance-event-1234567890abcdef0"
	spotPath      = "/latest/meta-data/spot/instance-action"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// lastIs reports whether the last report is want.
func lastIs(want []agent.Notice) func([][]agent.Notice, [][]agent.Problem) bool {
	return func(n [][]agent.Notice, _ [][]agent.Problem) bool {
		return len(n) > 0 && agent.SameNotices(n[len(n)-1], want)
	}
}

// checkHistory fails unless the source reported exactly want, in order,
// and never a problem.
func checkHistory(t *testing.T, rec *recorder, want ...[]agent.Notice) {
	t.Helper()
	notices, problems := rec.History()
	if len(notices) != len(want) {
		t.Fatalf("the source reported notices %d times, want %d (only on changes):%s", len(notices), len(want), reports.Describe(notices))
	}
	for i := range want {
		if !agent.SameNotices(notices[i], want[i]) {
			t.Errorf("report %d = %s, want %s", i, reports.Describe(notices[i:i+1]), reports.Describe(want[i:i+1]))
		}
	}
	for _, p := range problems {
		if len(p) != 0 {
			t.Errorf("the source reported problems %+v, want none", p)
		}
	}
}

// TestSpotInterruption: the mock answers 404 on spot/instance-action for 3
// seconds, then an interruption; the source reports no notice, then one
// with the action's mode and time, and nothing more while it stays.
func TestSpotInterruption(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		action string
		mode   v1alpha1.DrainMode
	}{
		{"terminate", v1alpha1.ModeDecommission},
		{"stop", v1alpha1.ModeMaintenance},
		{"hibernate", v1alpha1.ModeMaintenance},
	} {
		t.Run(tc.action, func(t *testing.T) {
			t.Parallel()
			m := startMock(t, "spot", "--action", tc.action, "--time", spotTime,
				"--mock-delay-sec", "3", "--rebalance-delay-sec", "3600")
			rec, ct := runSource(t, m.URL(), Options{})
			want := []agent.Notice{{
				Source: SourceSpot, Mode: tc.mode, Deadline: mustTime(t, spotTime),
				Reason: "AWS spot interruption: " + tc.action + " at " + spotTime,
			}}
			rec.WaitFor(t, "the spot notice", lastIs(want))
			ct.waitRequests(t, 12) // three more polls
			checkHistory(t, rec, []agent.Notice{}, want)
		})
	}
}

// TestRebalanceRecommendation: a rebalance recommendation cordons the node
// by default, and drains it with RebalanceDrain.
func TestRebalanceRecommendation(t *testing.T) {
	t.Parallel()
	for _, drain := range []bool{false, true} {
		name := map[bool]string{false: "cordon only", true: "drain"}[drain]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := startMock(t, "spot", "--rebalance-rec-time", rebalanceTime, "--mock-delay-sec", "3600")
			rec, ct := runSource(t, m.URL(), Options{RebalanceDrain: drain})
			want := []agent.Notice{{
				Source: SourceRebalance, CordonOnly: !drain, Mode: v1alpha1.ModeDecommission,
				Reason: "AWS rebalance recommendation at " + rebalanceTime + ": the spot instance is at elevated risk of interruption",
			}}
			rec.WaitFor(t, "the rebalance notice", lastIs(want))
			ct.waitRequests(t, 8)
			checkHistory(t, rec, want)
		})
	}
}

// TestScheduledMaintenance: an active scheduled event is a notice with the
// event's ID and NotBefore as the deadline; a canceled one is none.
func TestScheduledMaintenance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, state string
		mode        v1alpha1.DrainMode // empty: no notice
	}{
		{"system-reboot", "active", v1alpha1.ModeMaintenance},
		{"instance-retirement", "active", v1alpha1.ModeDecommission},
		{"instance-stop", "active", v1alpha1.ModeDecommission},
		{"system-maintenance", "canceled", ""},
	} {
		t.Run(tc.code+" "+tc.state, func(t *testing.T) {
			t.Parallel()
			m := startMock(t, "events", "--code", tc.code, "--state", tc.state, "--not-before", eventStart)
			rec, ct := runSource(t, m.URL(), Options{})
			want := []agent.Notice{}
			if tc.mode != "" {
				want = []agent.Notice{{
					Source: SourceMaintenance, ID: mockEventID, Mode: tc.mode, Deadline: mustTime(t, eventStart),
					Reason: "AWS scheduled event " + tc.code + " (" + mockEventID + ") not before " + eventStart +
						": The instance is scheduled for " + tc.code,
				}}
			}
			rec.WaitFor(t, "the maintenance notices", lastIs(want))
			ct.waitRequests(t, 8)
			checkHistory(t, rec, want)
		})
	}
}

// TestAutoScalingTermination: the target lifecycle state goes from
// InService to Terminated after 3 seconds; the source reports no notice,
// then the termination.
func TestAutoScalingTermination(t *testing.T) {
	t.Parallel()
	m := startMock(t, "asglifecycle", "--asg-termination-delay-sec", "3")
	rec, ct := runSource(t, m.URL(), Options{})
	want := []agent.Notice{{Source: SourceASG, Mode: v1alpha1.ModeDecommission, Reason: "Auto Scaling is terminating the instance"}}
	rec.WaitFor(t, "the Auto Scaling notice", lastIs(want))
	ct.waitRequests(t, 8)
	checkHistory(t, rec, []agent.Notice{}, want)
}

// TestMockRequiresToken proves the mock enforces IMDSv2, so the other
// tests exercise the source's tokens: a GET without a token, or with one
// the mock never gave, is refused; with a token it answers.
func TestMockRequiresToken(t *testing.T) {
	t.Parallel()
	m := startMock(t, "spot", "--time", spotTime)
	get := func(token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, m.URL()+spotPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set(tokenHeader, token)
		}
		status, body, err := send(req)
		if err != nil {
			t.Fatal(err)
		}
		return status, body
	}
	if status, _ := get(""); status != http.StatusUnauthorized {
		t.Errorf("GET without a token: status %d, want 401", status)
	}
	if status, _ := get(strings.Repeat("A", 43) + "="); status != http.StatusUnauthorized {
		t.Errorf("GET with a token the mock never gave: status %d, want 401", status)
	}
	token, err := mockToken(m.URL(), "60")
	if err != nil {
		t.Fatal(err)
	}
	if status, body := get(token); status != http.StatusOK || !strings.Contains(body, spotTime) {
		t.Errorf("GET with a token: status %d %q, want 200 with the interruption", status, body)
	}
}

// tokenCounter is a proxy in front of the mock that counts token requests
// and refused GETs.
type tokenCounter struct {
	puts, refused atomic.Int64
}

func (c *tokenCounter) proxy(t *testing.T, target string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodGet && resp.StatusCode == http.StatusUnauthorized {
			c.refused.Add(1)
		}
		return nil
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == tokenPath {
			c.puts.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestTokenRefresh: with a 1-second token and a fake clock that does not
// move, the mock expires the token while the source still trusts it; the
// next poll is refused once, gets a new token and reads on, with no
// problem and no new report. Then the clock passes four fifths of the
// token's life and the source gets a new token before it is refused.
func TestTokenRefresh(t *testing.T) {
	t.Parallel()
	m := startMock(t, "spot", "--time", spotTime, "--rebalance-delay-sec", "3600")
	var c tokenCounter
	proxy := c.proxy(t, m.URL())
	clk := clocktesting.NewFakeClock(time.Now())
	interval := 100 * time.Millisecond
	rec, _ := runSource(t, proxy.URL, Options{Clock: clk, Interval: interval, TokenTTL: time.Second})

	// pollDone waits until Run waits for its next poll.
	pollDone := func() {
		t.Helper()
		testutil.Eventually(t, waitTimeout, "the source to finish its poll", testutil.Holds(clk.HasWaiters))
	}
	check := func(when string, puts, refused int64) {
		t.Helper()
		if got := c.puts.Load(); got != puts {
			t.Errorf("%s: %d token requests, want %d", when, got, puts)
		}
		if got := c.refused.Load(); got != refused {
			t.Errorf("%s: %d refused GETs, want %d", when, got, refused)
		}
	}
	want := []agent.Notice{{
		Source: SourceSpot, Mode: v1alpha1.ModeDecommission, Deadline: mustTime(t, spotTime),
		Reason: "AWS spot interruption: terminate at " + spotTime,
	}}

	pollDone()
	check("first poll", 1, 0)

	t.Log("letting the mock expire the token while the fake clock stands still")
	time.Sleep(1100 * time.Millisecond)
	clk.Step(interval)
	pollDone()
	check("poll with an expired token", 2, 1)

	t.Log("moving the clock past four fifths of the new token's life")
	clk.Step(8 * interval)
	pollDone()
	check("poll after four fifths of the token's life", 3, 1)

	checkHistory(t, rec, want)
}

// TestMetadataDown: the mock goes away and comes back. While it is down
// the source reports MetadataUnavailable and keeps its notice; when it is
// back (with none of the old tokens) the problem clears, and the notice was
// never reported again, dropped or changed.
func TestMetadataDown(t *testing.T) {
	t.Parallel()
	m := startMock(t, "spot", "--time", spotTime, "--rebalance-delay-sec", "3600")
	rec, ct := runSource(t, m.URL(), Options{})
	want := []agent.Notice{{
		Source: SourceSpot, Mode: v1alpha1.ModeDecommission, Deadline: mustTime(t, spotTime),
		Reason: "AWS spot interruption: terminate at " + spotTime,
	}}
	rec.WaitFor(t, "the spot notice", lastIs(want))

	t.Log("stopping the metadata mock")
	m.Stop()
	rec.WaitFor(t, "a MetadataUnavailable problem", func(_ [][]agent.Notice, p [][]agent.Problem) bool {
		return len(p) > 0 && len(p[len(p)-1]) == 1
	})
	ct.waitRequests(t, 5)
	_, problems := rec.History()
	p := problems[len(problems)-1][0]
	if p.Source != Name || p.Reason != ReasonMetadataUnavailable || !strings.Contains(p.Message, m.URL()) {
		t.Errorf("problem = %+v, want source %q, reason %q and a message naming %s", p, Name, ReasonMetadataUnavailable, m.URL())
	}

	t.Log("starting the metadata mock again on the same port")
	m.Start()
	rec.WaitFor(t, "the problem to clear", func(_ [][]agent.Notice, p [][]agent.Problem) bool {
		return len(p[len(p)-1]) == 0
	})
	ct.waitRequests(t, 8)

	notices, problems := rec.History()
	if len(notices) != 1 || !agent.SameNotices(notices[0], want) {
		t.Errorf("notices reported:%s\nwant only the spot notice, once", reports.Describe(notices))
	}
	if len(problems[0]) != 0 || len(problems[len(problems)-1]) != 0 {
		t.Errorf("problems reported %+v, want none at first and none at last", problems)
	}
	for _, ps := range problems[1 : len(problems)-1] {
		if len(ps) != 1 || ps[0].Reason != ReasonMetadataUnavailable {
			t.Errorf("problems reported during the outage %+v, want one MetadataUnavailable", ps)
		}
	}
}

// TestStartsWithoutMetadata: when the service does not answer from the
// start, the source reports the problem and no notices at all (not even
// none), until the service answers.
func TestStartsWithoutMetadata(t *testing.T) {
	t.Parallel()
	m := awstest.NewMock(t, "asglifecycle")
	rec, ct := runSource(t, m.URL(), Options{})
	rec.WaitFor(t, "a MetadataUnavailable problem", func(_ [][]agent.Notice, p [][]agent.Problem) bool {
		return len(p) == 1 && len(p[0]) == 1 && p[0][0].Reason == ReasonMetadataUnavailable
	})
	ct.waitRequests(t, 5)
	if notices, _ := rec.History(); len(notices) != 0 {
		t.Fatalf("notices reported before the service answered:%s", reports.Describe(notices))
	}

	m.Start()
	want := []agent.Notice{{Source: SourceASG, Mode: v1alpha1.ModeDecommission, Reason: "Auto Scaling is terminating the instance"}}
	rec.WaitFor(t, "the Auto Scaling notice and no problem", func(n [][]agent.Notice, p [][]agent.Problem) bool {
		return len(n) == 1 && agent.SameNotices(n[0], want) && len(p[len(p)-1]) == 0
	})
}

// faultProxy is a proxy in front of the mock that can answer GETs with a
// server error, or spot/instance-action with malformed JSON.
type faultProxy struct {
	mu    sync.Mutex
	fault string // "", "5xx" or "bad json"
}

func (f *faultProxy) set(fault string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

func (f *faultProxy) start(t *testing.T, target string) *httptest.Server {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fault := f.fault
		f.mu.Unlock()
		switch {
		case fault == "5xx" && r.Method == http.MethodGet:
			http.Error(w, "internal error", http.StatusInternalServerError)
		case fault == "bad json" && r.URL.Path == spotPath:
			_, _ = w.Write([]byte(`{"action": "terminate", "time":`))
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestErrorAnswersKeepNotices: server errors on every path, then malformed
// JSON on the spot path, are problems that clear when the answers are good
// again; the spot notice is kept throughout.
func TestErrorAnswersKeepNotices(t *testing.T) {
	t.Parallel()
	m := startMock(t, "spot", "--time", spotTime, "--rebalance-delay-sec", "3600")
	var f faultProxy
	proxy := f.start(t, m.URL())
	rec, ct := runSource(t, proxy.URL, Options{})
	want := []agent.Notice{{
		Source: SourceSpot, Mode: v1alpha1.ModeDecommission, Deadline: mustTime(t, spotTime),
		Reason: "AWS spot interruption: terminate at " + spotTime,
	}}
	rec.WaitFor(t, "the spot notice", lastIs(want))

	for _, tc := range []struct{ fault, inMessage string }{
		{"5xx", "unexpected status 500"},
		{"bad json", "decoding spot instance action"},
	} {
		t.Logf("answering with %s", tc.fault)
		f.set(tc.fault)
		rec.WaitFor(t, "a problem about "+tc.fault, func(_ [][]agent.Notice, p [][]agent.Problem) bool {
			last := p[len(p)-1]
			return len(last) == 1 && last[0].Reason == ReasonMetadataUnavailable && strings.Contains(last[0].Message, tc.inMessage)
		})
		ct.waitRequests(t, 8)
		f.set("")
		rec.WaitFor(t, "the problem to clear", func(_ [][]agent.Notice, p [][]agent.Problem) bool {
			return len(p[len(p)-1]) == 0
		})
	}
	ct.waitRequests(t, 8)
	if notices, _ := rec.History(); len(notices) != 1 {
		t.Errorf("notices reported:%s\nwant only the spot notice, once", reports.Describe(notices))
	}
}

// notAfterStripper is a proxy in front of the mock that takes NotAfter out
// of every scheduled event, as EC2 writes events that have no end time
// (the mock always writes one).
func notAfterStripper(t *testing.T, target string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/latest/meta-data/events/maintenance/scheduled" || resp.StatusCode != http.StatusOK {
			return nil
		}
		defer resp.Body.Close()
		var events []map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&events); err != nil {
			return err
		}
		for _, e := range events {
			delete(e, "NotAfter")
		}
		b, err := json.Marshal(events)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	s := httptest.NewServer(rp)
	t.Cleanup(s.Close)
	return s
}

// TestScheduledEventAlreadyDue: events whose NotBefore has passed on the
// agent's clock. A reboot or maintenance event whose window is still open
// may happen at any moment until NotAfter, its documented latest end: that
// is its deadline. One that has no NotAfter, whose NotAfter has passed
// too, or a stop or retirement (which happens at NotBefore, the scheduled
// time) is due now: its deadline is two minutes from when the source first
// saw it so, and stays there however often the source polls.
func TestScheduledEventAlreadyDue(t *testing.T) {
	t.Parallel()
	const margin = 2 * time.Minute // the documented margin of an event that is due
	start := mustTime(t, eventStart)
	now := start.Add(time.Hour) // the agent's clock: NotBefore is an hour ago
	windowEnd := start.Add(2 * time.Hour)
	for _, tc := range []struct {
		name, code string
		notAfter   string // "": the mock's is stripped
		mode       v1alpha1.DrainMode
		deadline   time.Time
		reason     string
	}{
		{
			name: "reboot, window open", code: "system-reboot", notAfter: windowEnd.Format(time.RFC3339),
			mode: v1alpha1.ModeMaintenance, deadline: windowEnd,
			reason: "AWS scheduled event system-reboot (" + mockEventID + ") may start at any moment: its window opened at " +
				eventStart + " and ends by " + windowEnd.Format(time.RFC3339) + ": The instance is scheduled for system-reboot",
		},
		{
			name: "maintenance, window over", code: "system-maintenance", notAfter: start.Add(30 * time.Minute).Format(time.RFC3339),
			mode: v1alpha1.ModeMaintenance, deadline: now.Add(margin),
			reason: "AWS scheduled event system-maintenance (" + mockEventID + ") was due at " + eventStart +
				" and may happen at any moment: The instance is scheduled for system-maintenance",
		},
		{
			name: "reboot, no NotAfter", code: "instance-reboot",
			mode: v1alpha1.ModeMaintenance, deadline: now.Add(margin),
			reason: "AWS scheduled event instance-reboot (" + mockEventID + ") was due at " + eventStart +
				" and may happen at any moment: The instance is scheduled for instance-reboot",
		},
		{
			name: "stop, NotAfter ahead", code: "instance-stop", notAfter: windowEnd.Format(time.RFC3339),
			mode: v1alpha1.ModeDecommission, deadline: now.Add(margin),
			reason: "AWS scheduled event instance-stop (" + mockEventID + ") was due at " + eventStart +
				" and may happen at any moment: The instance is scheduled for instance-stop",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"events", "--code", tc.code, "--state", "active", "--not-before", eventStart}
			if tc.notAfter != "" {
				args = append(args, "--not-after", tc.notAfter)
			}
			m := startMock(t, args...)
			endpoint := m.URL()
			if tc.notAfter == "" {
				endpoint = notAfterStripper(t, endpoint).URL
			}
			clk := clocktesting.NewFakeClock(now)
			interval := 100 * time.Millisecond
			rec, _ := runSource(t, endpoint, Options{Clock: clk, Interval: interval})
			want := []agent.Notice{{
				Source: SourceMaintenance, ID: mockEventID, Mode: tc.mode, Deadline: tc.deadline, Reason: tc.reason,
			}}
			rec.WaitFor(t, "the notice of the due event", lastIs(want))
			for range 5 { // five more polls, the clock moving on each
				waitPollDone(t, clk)
				clk.Step(interval)
			}
			waitPollDone(t, clk)
			checkHistory(t, rec, want)
		})
	}
}

// waitPollDone waits until Run, on the fake clock, waits for its next poll.
func waitPollDone(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "the source to finish its poll", testutil.Holds(clk.HasWaiters))
}
