package gcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/agent/gcp"
	"github.com/vacate-dev/vacate/internal/dev/doubles/gcptest"
	"github.com/vacate-dev/vacate/internal/dev/doubles/reports"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// recorder keeps what the source reports.
type recorder = reports.Recorder

func none[T any](xs []T) bool { return len(xs) == 0 }

func hasReason(reason string) func([]agent.Problem) bool {
	return func(ps []agent.Problem) bool {
		return slices.ContainsFunc(ps, func(p agent.Problem) bool { return p.Reason == reason })
	}
}

// start runs a source against endpoint until the test ends, with a fixed
// clock and short retries; wait is the hanging GETs' timeout.
func start(t *testing.T, endpoint string, wait time.Duration) *recorder {
	t.Helper()
	return startClock(t, endpoint, wait, func() time.Time { return t0 })
}

// startClock is start with the clock now.
func startClock(t *testing.T, endpoint string, wait time.Duration, now func() time.Time) *recorder {
	t.Helper()
	src := gcp.New(gcp.Options{
		Endpoint:    endpoint,
		WaitTimeout: wait,
		RetryMin:    5 * time.Millisecond,
		RetryMax:    20 * time.Millisecond,
		Now:         now,
	})
	if src.Name() != "gcp" {
		t.Errorf("Name() = %q, want gcp", src.Name())
	}
	r := reports.Run(t, src)
	return r
}

func preempted() agent.Notice {
	return agent.Notice{
		Source:   gcp.SourcePreempted,
		Mode:     v1alpha1.ModeDecommission,
		Deadline: t0.Add(30 * time.Second),
		Reason:   "GCP preemption: Compute Engine stops the VM by 2026-11-23T12:00:30Z",
	}
}

func maintenance() agent.Notice {
	return agent.Notice{
		Source:   gcp.SourceMaintenance,
		Mode:     v1alpha1.ModeMaintenance,
		Deadline: t0.Add(60 * time.Second),
		Reason:   "GCP host maintenance: Compute Engine stops the VM for maintenance (TERMINATE_ON_HOST_MAINTENANCE) from 2026-11-23T12:01:00Z",
	}
}

func equal(a, b []agent.Notice) bool {
	return slices.EqualFunc(a, b, func(x, y agent.Notice) bool {
		return x.Source == y.Source && x.CordonOnly == y.CordonOnly && x.Mode == y.Mode &&
			x.Deadline.Equal(y.Deadline) && x.Reason == y.Reason && x.ID == y.ID
	})
}

func TestReportsQuietStateAtOnce(t *testing.T) {
	s := gcptest.NewServer(t)
	r := start(t, s.URL(), 30*time.Second)
	r.WaitNotices(t, "an empty notice list", none)
	r.WaitProblems(t, "an empty problem list", none)
}

func TestPreemptionSeenThroughTheHangingGET(t *testing.T) {
	s := gcptest.NewServer(t)
	r := start(t, s.URL(), 30*time.Second)
	r.WaitNotices(t, "the first report", none)
	// Both keys are in a hanging GET that would last 30s: the change must
	// end it, not its timeout.
	testutil.Eventually(t, 5*time.Second, "both hanging GETs", testutil.Holds(func() bool { return s.Waiting() == 2 }))
	began := time.Now()
	s.SetPreempted(true)
	got := r.WaitNotices(t, "the preemption notice", func(ns []agent.Notice) bool { return len(ns) > 0 })
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("the notice came %v after the change", took)
	}
	if want := []agent.Notice{preempted()}; !equal(got, want) {
		t.Errorf("notices = %+v, want %+v", got, want)
	}
}

// setRead sets instance/maintenance-event and waits until the source has
// read it and hangs again.
func setRead(t *testing.T, s *gcptest.Server, value string) {
	t.Helper()
	n := s.Requests()
	s.SetMaintenanceEvent(value)
	testutil.Eventually(t, 5*time.Second, "the source to read "+value, testutil.Holds(func() bool { return s.Requests() > n && s.Waiting() == 2 }))
}

func TestMaintenanceTerminate(t *testing.T) {
	s := gcptest.NewServer(t)
	r := start(t, s.URL(), 30*time.Second)
	r.WaitNotices(t, "the first report", none)
	testutil.Eventually(t, 5*time.Second, "both hanging GETs", testutil.Holds(func() bool { return s.Waiting() == 2 }))
	s.SetMaintenanceEvent(gcp.MaintenanceTerminate)
	want := []agent.Notice{maintenance()}
	r.WaitNotices(t, "the maintenance notice", func(ns []agent.Notice) bool { return equal(ns, want) })
	s.SetMaintenanceEvent(gcp.MaintenanceNone)
	r.WaitNotices(t, "the notice to go", none)
}

func TestMaintenanceWithoutDrain(t *testing.T) {
	// A live migration, and a value the documentation does not give, are
	// no drain. Each is followed by a terminating event, whose notice must
	// be the first one reported: answers are handled in order, so a notice
	// for the value before would come first.
	for _, tc := range []struct {
		value   string
		problem bool
	}{
		{value: gcp.MaintenanceMigrate},
		{value: "SOMETHING_NEW", problem: true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			s := gcptest.NewServer(t)
			r := start(t, s.URL(), 30*time.Second)
			r.WaitNotices(t, "the first report", none)
			testutil.Eventually(t, 5*time.Second, "both hanging GETs", testutil.Holds(func() bool { return s.Waiting() == 2 }))
			setRead(t, s, tc.value)
			if tc.problem {
				p := r.WaitProblems(t, gcp.ReasonUnexpectedValue, hasReason(gcp.ReasonUnexpectedValue))
				if !strings.Contains(p[0].Message, tc.value) {
					t.Errorf("problem %q does not name the value", p[0].Message)
				}
			}
			s.SetMaintenanceEvent(gcp.MaintenanceTerminate)
			want := []agent.Notice{maintenance()}
			r.WaitNotices(t, "the maintenance notice", func(ns []agent.Notice) bool { return equal(ns, want) })
			if ns, _ := r.History(); len(ns) != 2 || len(ns[0]) != 0 {
				t.Errorf("notices reported %+v, want none then the terminating event's", ns)
			}
			r.WaitProblems(t, "no problem", none)
		})
	}
}

func TestOutageKeepsNotices(t *testing.T) {
	s := gcptest.NewServer(t)
	s.SetPreempted(true)
	// The clock moves a second each time it is read: a deadline taken
	// again from it would show.
	var mu sync.Mutex
	now := t0
	r := startClock(t, s.URL(), 30*time.Second, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	})
	want := r.WaitNotices(t, "the preemption notice", func(ns []agent.Notice) bool { return len(ns) == 1 })
	// The keys answer in either order: the clock was read once or twice.
	if d := want[0].Deadline; want[0].Source != gcp.SourcePreempted || !d.Equal(t0.Add(31*time.Second)) && !d.Equal(t0.Add(32*time.Second)) {
		t.Fatalf("notices %+v, want the preemption's, deadline 30s after it was read", want)
	}

	s.Stop() // connection refused
	p := r.WaitProblems(t, "MetadataUnavailable", hasReason(gcp.ReasonMetadataUnavailable))
	if !strings.Contains(p[0].Message, s.URL()) || p[0].Source != "gcp" {
		t.Errorf("problem %+v does not name the endpoint and the source", p[0])
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	r.WaitProblems(t, "the problem to clear", none)

	s.SetUnavailable(true) // 503, as during a live migration
	r.WaitProblems(t, "MetadataUnavailable on 503", hasReason(gcp.ReasonMetadataUnavailable))
	s.SetMaintenanceEvent("TERMINATE_ON_HOST_MAINTENANCE") // changes while it is unavailable
	s.SetUnavailable(false)
	r.WaitProblems(t, "the problem to clear", none)
	both := r.WaitNotices(t, "both notices", func(ns []agent.Notice) bool { return len(ns) == 2 })
	if both[1].Source != gcp.SourceMaintenance {
		t.Errorf("notices %+v, want the preemption's then the maintenance's", both)
	}

	// Through it all the preemption notice never left, never changed, and
	// nothing else was reported.
	ns, _ := r.History()
	for i, got := range ns {
		if !equal(got, want) && !equal(got, both) {
			t.Errorf("report %d: notices %+v", i, got)
		}
	}
	if !equal(both[:1], want) {
		t.Errorf("the preemption notice changed: %+v, then %+v", want, both[:1])
	}
}

func TestAnswerNotFromTheMetadataServer(t *testing.T) {
	// Something else answers on the address (a proxy, a captive portal):
	// no Metadata-Flavor header. Its "TRUE" must not become a notice.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("ETag", "0123456789abcdef")
		_, _ = w.Write([]byte("TRUE"))
	}))
	t.Cleanup(srv.Close)
	r := start(t, srv.URL, 30*time.Second)
	p := r.WaitProblems(t, "MetadataUnavailable", hasReason(gcp.ReasonMetadataUnavailable))
	if !strings.Contains(p[0].Message, "Metadata-Flavor") {
		t.Errorf("problem %q does not say why", p[0].Message)
	}
	// Not an answer: no notice list at all, not even an empty one (an
	// agent restarted now must not take it for "no notice").
	if ns, _ := r.History(); len(ns) > 0 {
		t.Errorf("reported notices %+v from a server that is not the metadata server", ns)
	}
}

func TestEveryRequestCarriesTheFlavorAndETag(t *testing.T) {
	// A server that records requests, before passing them to the fake.
	fake := gcptest.NewServer(t)
	var mu sync.Mutex
	var seen []*http.Request
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		seen = append(seen, req.Clone(context.Background()))
		mu.Unlock()
		out, _ := http.NewRequestWithContext(req.Context(), req.Method, fake.URL()+req.URL.RequestURI(), nil)
		out.Header = req.Header.Clone()
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 1024)
		n, _ := resp.Body.Read(buf)
		_, _ = w.Write(buf[:n])
	}))
	t.Cleanup(proxy.Close)
	r := start(t, proxy.URL, 2*time.Second)
	r.WaitNotices(t, "the first report", none)
	testutil.Eventually(t, 5*time.Second, "a hanging GET per key", testutil.Holds(func() bool { return fake.Waiting() == 2 }))

	mu.Lock()
	defer mu.Unlock()
	hanging := 0
	for _, req := range seen {
		if req.Header.Get("Metadata-Flavor") != "Google" {
			t.Errorf("%s without Metadata-Flavor: Google", req.URL)
		}
		if req.Header.Get("X-Forwarded-For") != "" {
			t.Errorf("%s with X-Forwarded-For", req.URL)
		}
		q := req.URL.Query()
		if q.Get("wait_for_change") != "true" {
			continue
		}
		hanging++
		if q.Get("last_etag") == "" || q.Get("timeout_sec") != "2" {
			t.Errorf("hanging GET %s lacks last_etag or timeout_sec=2", req.URL)
		}
	}
	if hanging < 2 {
		t.Errorf("%d hanging GETs, want one per key", hanging)
	}
}

// gpuMaintenance is the notice of a terminating host maintenance read at
// t0 on a VM of machineType, which has GPUs.
func gpuMaintenance(machineType string) agent.Notice {
	return agent.Notice{
		Source:   gcp.SourceMaintenance,
		Mode:     v1alpha1.ModeMaintenance,
		Deadline: t0.Add(time.Hour),
		Reason: "GCP host maintenance: Compute Engine stops the VM for maintenance (TERMINATE_ON_HOST_MAINTENANCE) from 2026-11-23T13:00:00Z: " +
			"a VM with GPUs (machine type " + machineType + ") is told an hour before",
	}
}

// TestGPUMaintenanceNotice: Compute Engine gives VMs with GPUs an hour's
// notice of a host maintenance, others 60 seconds. The machine types of the
// accelerator-optimized series (A2, A3, A4, A4X, G2, G4) have GPUs; the
// source reads the machine type from the metadata server, even when the
// server answers only after the maintenance event is set.
func TestGPUMaintenanceNotice(t *testing.T) {
	for _, tc := range []struct {
		machineType string
		gpu         bool
	}{
		{"a2-highgpu-1g", true},
		{"a2-ultragpu-8g", true},
		{"a3-highgpu-8g", true},
		{"a3-megagpu-8g", true},
		{"a4-highgpu-8g", true},
		{"a4x-highgpu-4g", true},
		{"g2-standard-4", true},
		{"g4-standard-48", true},
		{"n2-standard-4", false},
		{"c3-highcpu-4", false},
		{"a2x-standard-4", false}, // not a series of the documentation
	} {
		want := []agent.Notice{maintenance()}
		if tc.gpu {
			want = []agent.Notice{gpuMaintenance(tc.machineType)}
		}
		t.Run(tc.machineType, func(t *testing.T) {
			s := gcptest.NewServer(t)
			s.SetMachineType(tc.machineType)
			r := start(t, s.URL(), 30*time.Second)
			r.WaitNotices(t, "the first report", none)
			testutil.Eventually(t, 5*time.Second, "both hanging GETs", testutil.Holds(func() bool { return s.Waiting() == 2 }))
			s.SetMaintenanceEvent(gcp.MaintenanceTerminate)
			r.WaitNotices(t, "the maintenance notice", func(ns []agent.Notice) bool { return equal(ns, want) })
			r.WaitProblems(t, "no problem", none)
		})
	}
	t.Run("metadata server down at start", func(t *testing.T) {
		s := gcptest.NewServer(t)
		s.SetMachineType("a3-highgpu-8g")
		s.SetMaintenanceEvent(gcp.MaintenanceTerminate)
		s.SetUnavailable(true)
		r := start(t, s.URL(), 30*time.Second)
		r.WaitProblems(t, "MetadataUnavailable", hasReason(gcp.ReasonMetadataUnavailable))
		s.SetUnavailable(false)
		want := []agent.Notice{gpuMaintenance("a3-highgpu-8g")}
		r.WaitNotices(t, "the maintenance notice with the GPU VM's hour", func(ns []agent.Notice) bool { return equal(ns, want) })
		r.WaitProblems(t, "no problem", none)
	})
}

// TestUnreadableMachineType: a machine type not of the documented form is
// a problem that says so, and a host maintenance gets the 60 seconds of a
// VM without GPUs.
func TestUnreadableMachineType(t *testing.T) {
	s := gcptest.NewServer(t)
	s.Set(gcptest.KeyMachineType, "a3-highgpu-8g")
	r := start(t, s.URL(), 30*time.Second)
	p := r.WaitProblems(t, gcp.ReasonUnexpectedValue, hasReason(gcp.ReasonUnexpectedValue))
	if !strings.Contains(p[0].Message, `"a3-highgpu-8g"`) || !strings.Contains(p[0].Message, "projects/PROJECT_NUM/machineTypes/NAME") {
		t.Errorf("problem %q does not name the value and the form expected", p[0].Message)
	}
	testutil.Eventually(t, 5*time.Second, "both hanging GETs", testutil.Holds(func() bool { return s.Waiting() == 2 }))
	s.SetMaintenanceEvent(gcp.MaintenanceTerminate)
	want := []agent.Notice{maintenance()}
	r.WaitNotices(t, "the maintenance notice", func(ns []agent.Notice) bool { return equal(ns, want) })
}
