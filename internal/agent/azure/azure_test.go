package azure_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/agent/azure"
	"github.com/vacate-dev/vacate/internal/dev/doubles/azuretest"
	"github.com/vacate-dev/vacate/internal/dev/doubles/reports"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// notBefore is NotBefore as the service writes it: "Mon, 19 Sep 2016
// 18:29:47 GMT".
func notBefore(d time.Duration) string { return t0.Add(d).Format(http.TimeFormat) }

// recorder keeps what the source reports.
type recorder = reports.Recorder

// polls waits until the source has polled n more times.
func polls(t *testing.T, s *azuretest.Server, n int) {
	t.Helper()
	from := s.Requests()
	testutil.Eventually(t, 5*time.Second, "polls", testutil.Holds(func() bool { return s.Requests() >= from+n }))
}

func none[T any](xs []T) bool { return len(xs) == 0 }

func count(n int) func([]agent.Notice) bool {
	return func(ns []agent.Notice) bool { return len(ns) == n }
}

func hasReason(reason string) func([]agent.Problem) bool {
	return func(ps []agent.Problem) bool {
		return slices.ContainsFunc(ps, func(p agent.Problem) bool { return p.Reason == reason })
	}
}

// start runs a source against the fake until the test ends, with a fixed
// clock, a 5ms interval, and the VM name read from the fake.
func start(t *testing.T, s *azuretest.Server, o azure.Options) (*azure.Source, *recorder) {
	t.Helper()
	o.Endpoint = s.URL()
	o.Interval = 5 * time.Millisecond
	o.RetryMax = 20 * time.Millisecond
	o.Now = func() time.Time { return t0 }
	src := azure.New(o)
	r := reports.Run(t, src)
	return src, r
}

func equal(a, b []agent.Notice) bool {
	return slices.EqualFunc(a, b, func(x, y agent.Notice) bool {
		return x.Source == y.Source && x.CordonOnly == y.CordonOnly && x.Mode == y.Mode &&
			x.Deadline.Equal(y.Deadline) && x.ID == y.ID
	})
}

func TestNoticePerEventType(t *testing.T) {
	for _, tc := range []struct {
		eventType   string
		freezeDrain bool
		want        agent.Notice
	}{
		{eventType: "Preempt", want: agent.Notice{Source: "azure-preempt", Mode: v1alpha1.ModeDecommission}},
		{eventType: "Terminate", want: agent.Notice{Source: "azure-terminate", Mode: v1alpha1.ModeDecommission}},
		{eventType: "Reboot", want: agent.Notice{Source: "azure-reboot", Mode: v1alpha1.ModeMaintenance}},
		{eventType: "Redeploy", want: agent.Notice{Source: "azure-redeploy", Mode: v1alpha1.ModeDecommission}},
		{eventType: "Freeze", want: agent.Notice{Source: "azure-freeze", Mode: v1alpha1.ModeMaintenance, CordonOnly: true}},
		{eventType: "Freeze", freezeDrain: true, want: agent.Notice{Source: "azure-freeze", Mode: v1alpha1.ModeMaintenance}},
	} {
		name := tc.eventType
		if tc.freezeDrain {
			name += " with FreezeDrain"
		}
		t.Run(name, func(t *testing.T) {
			s := azuretest.NewServer(t, "vm-1")
			// Events of the availability set's other VMs, and of another
			// resource type, are not this VM's.
			s.AddEvent(azuretest.Event{EventID: "other", EventType: tc.eventType, Resources: []string{"vm-2"}, NotBefore: notBefore(time.Minute)})
			s.AddEvent(azuretest.Event{EventID: "not-a-vm", EventType: tc.eventType, ResourceType: "Disk", Resources: []string{"vm-1"}, NotBefore: notBefore(time.Minute)})
			_, r := start(t, s, azure.Options{FreezeDrain: tc.freezeDrain})
			r.WaitNotices(t, "the first report", none)
			r.WaitProblems(t, "no problem", none)

			s.AddEvent(azuretest.Event{
				EventID: "e1", EventType: tc.eventType, Resources: []string{"VM-1", "vm-2"},
				NotBefore: notBefore(15 * time.Minute), Description: "Host server is undergoing maintenance.", EventSource: "Platform", DurationInSeconds: 9,
			})
			got := r.WaitNotices(t, "the notice", count(1))
			want := tc.want
			want.Deadline, want.ID = t0.Add(15*time.Minute), "e1"
			if !equal(got, []agent.Notice{want}) {
				t.Errorf("notices = %+v, want %+v", got, want)
			}
			if wantReason := "Azure scheduled event " + tc.eventType + " (Platform), not before 2026-11-23T12:15:00Z: Host server is undergoing maintenance."; got[0].Reason != wantReason {
				t.Errorf("reason %q, want %q", got[0].Reason, wantReason)
			}

			s.RemoveEvent("e1")
			r.WaitNotices(t, "the notice to go", none)
		})
	}
}

func TestEventsSortedAndUnknownTypes(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	_, r := start(t, s, azure.Options{VMName: "vm-1"})
	s.AddEvent(azuretest.Event{EventID: "late", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: notBefore(15 * time.Minute)})
	s.AddEvent(azuretest.Event{EventID: "soon", EventType: "Preempt", Resources: []string{"vm-1"}, NotBefore: notBefore(30 * time.Second)})
	s.AddEvent(azuretest.Event{EventID: "new", EventType: "Hibernate", Resources: []string{"vm-1"}, NotBefore: notBefore(time.Minute)})
	got := r.WaitNotices(t, "two notices", count(2))
	if got[0].ID != "soon" || got[1].ID != "late" {
		t.Errorf("notices %+v, want the soonest first", got)
	}
	p := r.WaitProblems(t, azure.ReasonUnknownEvent, hasReason(azure.ReasonUnknownEvent))
	if !strings.Contains(p[0].Message, `"Hibernate"`) {
		t.Errorf("problem %q does not name the type", p[0].Message)
	}
}

func TestStartedEvent(t *testing.T) {
	// After a host failure the event is Started at once, NotBefore empty:
	// its deadline is when it was seen. When a Scheduled event starts, its
	// deadline stays NotBefore.
	s := azuretest.NewServer(t, "vm-1")
	_, r := start(t, s, azure.Options{VMName: "vm-1"})
	r.WaitNotices(t, "the first report", none)
	s.AddEvent(azuretest.Event{EventID: "failed", EventType: "Reboot", EventStatus: "Started", Resources: []string{"vm-1"}})
	s.AddEvent(azuretest.Event{EventID: "planned", EventType: "Redeploy", Resources: []string{"vm-1"}, NotBefore: notBefore(10 * time.Minute)})
	got := r.WaitNotices(t, "two notices", count(2))
	if got[0].ID != "failed" || !got[0].Deadline.Equal(t0) || !got[1].Deadline.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("notices %+v", got)
	}
	s.AddEvent(azuretest.Event{EventID: "planned", EventType: "Redeploy", EventStatus: "Started", Resources: []string{"vm-1"}})
	polls(t, s, 3)
	ns, _ := r.History()
	if last := ns[len(ns)-1]; !equal(last, got) {
		t.Errorf("after the event started: %+v, want %+v", last, got)
	}
}

func TestFinishAcknowledgesOnceAndNotBefore(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	src, r := start(t, s, azure.Options{})
	s.AddEvent(azuretest.Event{EventID: "e1", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: notBefore(15 * time.Minute)})
	got := r.WaitNotices(t, "the notice", count(1))

	polls(t, s, 10)
	if acks := s.Acknowledgements(); len(acks) != 0 {
		t.Fatalf("acknowledged %v before Finish", acks)
	}

	if err := src.Finish(context.Background(), got[0], true); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if acks := s.Acknowledgements(); !slices.Equal(acks, []string{"e1"}) {
		t.Fatalf("Acknowledgements() = %v, want [e1]", acks)
	}
	if evs := s.Events(); evs[0].EventStatus != "Started" {
		t.Errorf("event %+v, want it Started", evs[0])
	}
	// The started event keeps its notice, deadline included.
	polls(t, s, 3)
	ns, _ := r.History()
	if last := ns[len(ns)-1]; !equal(last, got) {
		t.Errorf("after the acknowledgement: %+v, want %+v", last, got)
	}
	if err := src.Finish(context.Background(), got[0], true); err != nil {
		t.Fatalf("Finish again: %v", err)
	}
	if acks := s.Acknowledgements(); len(acks) != 1 {
		t.Errorf("Acknowledgements() = %v after a second Finish, want one", acks)
	}
}

func TestFinishOnceWhileAzureHoldsTheEvent(t *testing.T) {
	// An approved event may stay Scheduled while Azure waits for other
	// tenants: a second Finish, or two at once, still approve it once.
	s := azuretest.NewServer(t, "vm-1")
	s.HoldApprovals(true)
	src, r := start(t, s, azure.Options{VMName: "vm-1"})
	s.AddEvent(azuretest.Event{EventID: "e1", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: notBefore(15 * time.Minute)})
	n := r.WaitNotices(t, "the notice", count(1))[0]
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := src.Finish(context.Background(), n, true); err != nil {
				t.Errorf("Finish: %v", err)
			}
		})
	}
	wg.Wait()
	if err := src.Finish(context.Background(), n, true); err != nil {
		t.Errorf("Finish: %v", err)
	}
	if acks := s.Acknowledgements(); !slices.Equal(acks, []string{"e1"}) {
		t.Errorf("Acknowledgements() = %v, want [e1]", acks)
	}
	if evs := s.Events(); evs[0].EventStatus != "Scheduled" {
		t.Errorf("event %+v, want it held Scheduled", evs[0])
	}
}

func TestFinishLeavesEventsItMustNotAcknowledge(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	src, r := start(t, s, azure.Options{VMName: "vm-1"})
	s.AddEvent(azuretest.Event{EventID: "shared", EventType: "Freeze", Resources: []string{"vm-1", "vm-2"}, NotBefore: notBefore(15 * time.Minute)})
	s.AddEvent(azuretest.Event{EventID: "gone", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: notBefore(15 * time.Minute)})
	s.AddEvent(azuretest.Event{EventID: "started", EventType: "Reboot", EventStatus: "Started", Resources: []string{"vm-1"}})
	ns := r.WaitNotices(t, "three notices", count(3))
	s.RemoveEvent("gone")
	for _, n := range ns {
		if err := src.Finish(context.Background(), n, true); err != nil {
			t.Errorf("Finish(%s): %v", n.ID, err)
		}
	}
	if acks := s.Acknowledgements(); len(acks) != 0 {
		t.Errorf("acknowledged %v", acks)
	}
	if err := src.Finish(context.Background(), agent.Notice{Source: "gcp-preempted"}, true); err == nil {
		t.Error("Finish of another source's notice: no error")
	}
}

func TestFinishFailsWhileIMDSIsDown(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	src, r := start(t, s, azure.Options{VMName: "vm-1"})
	s.AddEvent(azuretest.Event{EventID: "e1", EventType: "Preempt", Resources: []string{"vm-1"}, NotBefore: notBefore(30 * time.Second)})
	n := r.WaitNotices(t, "the notice", count(1))[0]
	s.Stop()
	if err := src.Finish(context.Background(), n, false); err == nil {
		t.Fatal("Finish with IMDS down: no error")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := src.Finish(context.Background(), n, false); err != nil {
		t.Fatalf("Finish again: %v", err)
	}
	if acks := s.Acknowledgements(); !slices.Equal(acks, []string{"e1"}) {
		t.Errorf("Acknowledgements() = %v, want [e1]", acks)
	}
}

func TestOutageKeepsNotices(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	s.AddEvent(azuretest.Event{EventID: "e1", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: notBefore(15 * time.Minute)})
	_, r := start(t, s, azure.Options{})
	want := r.WaitNotices(t, "the notice", count(1))
	r.WaitProblems(t, "no problem", none)

	s.Stop() // connection refused
	p := r.WaitProblems(t, "MetadataUnavailable", hasReason(azure.ReasonMetadataUnavailable))
	if p[0].Source != "azure" || !strings.Contains(p[0].Message, s.URL()) {
		t.Errorf("problem %+v does not name the source and the endpoint", p[0])
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	r.WaitProblems(t, "the problem to clear", none)

	s.SetStatus(500)
	r.WaitProblems(t, "MetadataUnavailable on 500", hasReason(azure.ReasonMetadataUnavailable))
	s.AddEvent(azuretest.Event{EventID: "e2", EventType: "Preempt", Resources: []string{"vm-1"}, NotBefore: notBefore(30 * time.Second)})
	s.SetStatus(0)
	both := r.WaitNotices(t, "both notices", count(2))
	r.WaitProblems(t, "the problem to clear", none)

	ns, _ := r.History()
	for i, got := range ns {
		if !equal(got, want) && !equal(got, both) {
			t.Errorf("report %d: notices %+v", i, got)
		}
	}
}

func TestVMNameUnavailable(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	s.SetStatus(410)
	_, r := start(t, s, azure.Options{})
	p := r.WaitProblems(t, "MetadataUnavailable", hasReason(azure.ReasonMetadataUnavailable))
	if !strings.Contains(p[0].Message, "VM's name") {
		t.Errorf("problem %q does not say what failed", p[0].Message)
	}
	s.AddEvent(azuretest.Event{EventID: "e1", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: notBefore(15 * time.Minute)})
	s.SetStatus(0)
	r.WaitNotices(t, "the notice", count(1))
	r.WaitProblems(t, "the problem to clear", none)
}

func TestBadEndpoint(t *testing.T) {
	src := azure.New(azure.Options{Endpoint: "169.254.169.254"})
	if err := src.Run(context.Background(), &recorder{}); err == nil {
		t.Error("Run with an endpoint that is not a URL: no error")
	}
}
