package logind_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/agent/logind"
	"github.com/vacate-dev/vacate/internal/dev/doubles/logindtest"
	"github.com/vacate-dev/vacate/internal/dev/doubles/reports"
)

// waitFor bounds every wait of a test.
const waitFor = 20 * time.Second

// now is the fake clock's time.
var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// recorder keeps what the source reports.
type recorder = reports.Recorder

func newRecorder() *recorder { return &reports.Recorder{} }

// notices is every Notices report so far.
func notices(r *recorder) [][]agent.Notice {
	ns, _ := r.History()
	return ns
}

// waitProblems waits until the last problems reported have these reasons.
func waitProblems(t *testing.T, r *recorder, reasons ...string) []agent.Problem {
	t.Helper()
	return r.WaitProblems(t, fmt.Sprintf("problems %v", reasons), func(last []agent.Problem) bool {
		got := []string{}
		for _, p := range last {
			got = append(got, p.Reason)
		}
		return slices.Equal(got, reasons)
	})
}

func none(ns []agent.Notice) bool { return len(ns) == 0 }
func one(ns []agent.Notice) bool  { return len(ns) == 1 }

// run runs the source until the test ends, and checks that Run returns nil
// then. The returned stop ends it at once.
func run(t *testing.T, src *logind.Source, r agent.Reporter) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, r) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil when its context ends", err)
				}
			case <-time.After(waitFor):
				t.Errorf("Run did not return within %s of its context's end", waitFor)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a bus, a stand-in logind with an inhibit delay of 60s, and a
// source on them with a fake clock that wants 30s.
type fixture struct {
	bus  *logindtest.Bus
	l    *logindtest.Logind
	src  *logind.Source
	rec  *recorder
	opts logind.Options
}

func newFixture(t *testing.T, change func(*logind.Options)) *fixture {
	bus := logindtest.RunBus(t)
	l := logindtest.StartConfig(t, bus.Address, logindtest.Config{InhibitDelayMax: time.Minute})
	opts := logind.Options{
		Address:  bus.Address,
		Want:     30 * time.Second,
		RetryMin: 20 * time.Millisecond,
		Now:      func() time.Time { return now },
	}
	if change != nil {
		change(&opts)
	}
	return &fixture{bus: bus, l: l, src: logind.New(opts), rec: newRecorder(), opts: opts}
}

// TestLockHeldAfterStart: the source takes a delay lock on shutdown as
// "vacate", and reports no notice and no problem.
func TestLockHeldAfterStart(t *testing.T) {
	f := newFixture(t, nil)
	run(t, f.src, f.rec)

	if err := f.l.WaitHeld(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	in := f.l.Inhibitors()
	if len(in) != 1 || in[0].What != "shutdown" || in[0].Mode != "delay" || in[0].Who != "vacate" || in[0].Why == "" {
		t.Errorf("inhibitors %+v, want one delay lock on shutdown by vacate, with a reason", in)
	}
	f.rec.WaitNotices(t, "no notice", none)
	waitProblems(t, f.rec)
	if got := f.src.Name(); got != "logind" {
		t.Errorf("Name() = %q, want logind", got)
	}
}

// TestInhibitDelay: an inhibit delay shorter than Want is a problem that
// names both and says where to raise it; a long enough one is not.
func TestInhibitDelay(t *testing.T) {
	for _, tc := range []struct {
		name        string
		delay, want time.Duration
		problem     bool
	}{
		{"default 5s, want 30s", logindtest.DefaultInhibitDelayMax, 30 * time.Second, true},
		{"29s, want 30s", 29 * time.Second, 30 * time.Second, true},
		{"30s, want 30s", 30 * time.Second, 30 * time.Second, false},
		{"2m, want 30s", 2 * time.Minute, 30 * time.Second, false},
		{"5s, want nothing", 5 * time.Second, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *logind.Options) { o.Want = tc.want })
			f.l.SetInhibitDelayMax(tc.delay)
			run(t, f.src, f.rec)
			if err := f.l.WaitHeld(waitCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			if !tc.problem {
				waitProblems(t, f.rec)
				return
			}
			p := waitProblems(t, f.rec, logind.ReasonInhibitDelayTooShort)[0]
			for _, s := range []string{tc.delay.String(), tc.want.String(), "InhibitDelayMaxSec=", "/etc/systemd/logind.conf", "/etc/systemd/logind.conf.d/", "never changes"} {
				if !strings.Contains(p.Message, s) {
					t.Errorf("message %q does not say %q", p.Message, s)
				}
			}
			if p.Source != "logind" {
				t.Errorf("problem's source %q, want logind", p.Source)
			}
		})
	}
}

// TestPrepareForShutdown: each kind of shutdown is one notice with its
// mode, and a deadline of the inhibit delay less the margin from when it
// came; the kind comes from PrepareForShutdownWithMetadata, or else from
// ScheduledShutdown.
func TestPrepareForShutdown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kind      string // PrepareForShutdownWithMetadata's; "" sends only PrepareForShutdown
		scheduled string // ScheduledShutdown's kind
		poweroff  v1alpha1.DrainMode
		mode      v1alpha1.DrainMode
		says      string
	}{
		{name: "reboot", kind: "reboot", mode: v1alpha1.ModeMaintenance, says: "rebooting"},
		{name: "kexec", kind: "kexec", mode: v1alpha1.ModeMaintenance, says: "kexec"},
		{name: "soft-reboot", kind: "soft-reboot", mode: v1alpha1.ModeMaintenance, says: "soft-rebooting"},
		{name: "poweroff", kind: "poweroff", mode: v1alpha1.ModeDecommission, says: "powering off"},
		{name: "halt", kind: "halt", mode: v1alpha1.ModeDecommission, says: "halting"},
		{name: "poweroff with PoweroffMode Maintenance", kind: "poweroff", poweroff: v1alpha1.ModeMaintenance, mode: v1alpha1.ModeMaintenance, says: "powering off"},
		{name: "metadata wins over ScheduledShutdown", kind: "poweroff", scheduled: "reboot", mode: v1alpha1.ModeDecommission, says: "powering off"},
		{name: "old logind, scheduled reboot", scheduled: "reboot", mode: v1alpha1.ModeMaintenance, says: "rebooting"},
		{name: "old logind, scheduled poweroff", scheduled: "poweroff", mode: v1alpha1.ModeDecommission, says: "powering off"},
		{name: "old logind, kind unknown", mode: v1alpha1.ModeDecommission, says: "kind unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *logind.Options) { o.PoweroffMode = tc.poweroff })
			if tc.scheduled != "" {
				f.l.SetScheduledShutdown(tc.scheduled, now.Add(time.Minute))
			}
			run(t, f.src, f.rec)
			if err := f.l.WaitHeld(waitCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			f.rec.WaitNotices(t, "no notice", none)

			f.l.EmitPrepareForShutdown(true, tc.kind)
			n := f.rec.WaitNotices(t, "a notice", one)[0]
			want := agent.Notice{Source: "shutdown", Mode: tc.mode, Deadline: now.Add(55 * time.Second), Reason: n.Reason}
			if n != want {
				t.Errorf("notice %+v, want %+v", n, want)
			}
			for _, s := range []string{tc.says, "PrepareForShutdown", "1m0s"} {
				if !strings.Contains(n.Reason, s) {
					t.Errorf("reason %q does not say %q", n.Reason, s)
				}
			}

			// Both signals of one shutdown make one report: cancel it, and
			// look at what came between.
			f.l.EmitPrepareForShutdown(false, tc.kind)
			f.rec.WaitNotices(t, "no notice after the cancel", none)
			h := notices(f.rec)
			if len(h) != 3 || len(h[0]) != 0 || len(h[1]) != 1 || len(h[2]) != 0 {
				t.Errorf("notices reported %+v, want none, the notice once, none", h)
			}
		})
	}
}

// TestSignalsFromOthersIgnored: a PrepareForShutdown that another
// process sends straight to the agent (the system bus lets any process
// send signals) makes no notice.
func TestSignalsFromOthersIgnored(t *testing.T) {
	f := newFixture(t, nil)
	run(t, f.src, f.rec)
	if err := f.l.WaitHeld(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	f.rec.WaitNotices(t, "no notice", none)

	rogue, err := dbus.Connect(f.bus.Address)
	if err != nil {
		t.Fatalf("connecting to the test bus: %v", err)
	}
	defer rogue.Close()
	var names []string
	if err := rogue.BusObject().Call("org.freedesktop.DBus.ListNames", 0).Store(&names); err != nil {
		t.Fatalf("listing the bus's names: %v", err)
	}
	sent := 0
	for _, name := range names {
		if !strings.HasPrefix(name, ":") || name == rogue.Names()[0] {
			continue
		}
		for _, body := range [][]any{
			{true, map[string]dbus.Variant{"type": dbus.MakeVariant("poweroff")}},
			{true},
		} {
			member := "PrepareForShutdown"
			if len(body) == 2 {
				member = "PrepareForShutdownWithMetadata"
			}
			msg := &dbus.Message{
				Type: dbus.TypeSignal,
				Headers: map[dbus.HeaderField]dbus.Variant{
					dbus.FieldPath:        dbus.MakeVariant(logindtest.Path),
					dbus.FieldInterface:   dbus.MakeVariant(logindtest.Interface),
					dbus.FieldMember:      dbus.MakeVariant(member),
					dbus.FieldDestination: dbus.MakeVariant(name),
					dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(body...)),
				},
				Body: body,
			}
			if call := rogue.Send(msg, nil); call.Err != nil {
				t.Fatalf("sending %s to %s: %v", member, name, call.Err)
			}
			sent++
		}
	}
	if sent == 0 {
		t.Fatalf("no connection to send to among %v", names)
	}

	// The bus answers in order, so the rogue's signals are on their way to
	// the agent before logind's: the notice is logind's.
	if err := rogue.BusObject().Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		t.Fatalf("pinging the bus: %v", err)
	}
	f.l.EmitPrepareForShutdown(true, "reboot")
	n := f.rec.WaitNotices(t, "a notice", one)[0]
	if h := notices(f.rec); len(h) != 2 || n.Mode != v1alpha1.ModeMaintenance {
		t.Errorf("notices reported %+v, want none, then logind's reboot only", h)
	}
}

// TestLockHeldUntilFinish: logind's lock stays held while the notice is
// current, goes with Finish (idempotent), and comes back when the shutdown
// is cancelled.
func TestLockHeldUntilFinish(t *testing.T) {
	f := newFixture(t, nil)
	run(t, f.src, f.rec)
	ctx := waitCtx(t)
	if err := f.l.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.l.EmitPrepareForShutdown(true, "reboot")
	n := f.rec.WaitNotices(t, "a notice", one)[0]
	time.Sleep(100 * time.Millisecond) // time enough to release it wrongly
	if got := f.l.Held(); got != 1 {
		t.Fatalf("%d locks held before Finish, want 1", got)
	}

	for range 2 {
		if err := f.src.Finish(ctx, n, true); err != nil {
			t.Fatalf("Finish: %v", err)
		}
	}
	if err := f.l.WaitReleased(ctx); err != nil {
		t.Fatal(err)
	}

	f.l.EmitPrepareForShutdown(false, "reboot")
	f.rec.WaitNotices(t, "no notice after the cancel", none)
	if err := f.l.WaitHeld(ctx, 1); err != nil {
		t.Fatalf("the lock was not taken again after the cancel: %v", err)
	}
}

// TestCancelledBeforeFinish: a shutdown cancelled before Finish leaves no
// notice and the one lock still held; a Finish after that changes nothing.
func TestCancelledBeforeFinish(t *testing.T) {
	f := newFixture(t, nil)
	run(t, f.src, f.rec)
	ctx := waitCtx(t)
	if err := f.l.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.l.EmitPrepareForShutdown(true, "poweroff")
	n := f.rec.WaitNotices(t, "a notice", one)[0]
	f.l.EmitPrepareForShutdown(false, "poweroff")
	f.rec.WaitNotices(t, "no notice", none)

	if err := f.src.Finish(ctx, n, false); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if got := f.l.Held(); got != 1 {
		t.Errorf("%d locks held, want 1", got)
	}
}

// TestStartedDuringShutdown: a source started while logind prepares for a
// shutdown reports it at once; logind refuses it a lock then, and it takes
// one when the shutdown is cancelled.
func TestStartedDuringShutdown(t *testing.T) {
	f := newFixture(t, nil)
	f.l.SetScheduledShutdown("reboot", now)
	f.l.EmitPrepareForShutdown(true, "reboot")
	run(t, f.src, f.rec)

	n := f.rec.WaitNotices(t, "a notice", one)[0]
	if h := notices(f.rec); len(h[0]) != 1 {
		t.Errorf("first notices reported %+v, want the notice at once", h[0])
	}
	if n.Mode != v1alpha1.ModeMaintenance || !n.Deadline.Equal(now.Add(55*time.Second)) || !strings.Contains(n.Reason, "held no inhibitor lock") {
		t.Errorf("notice %+v, want Maintenance, deadline %s, and a reason that says no lock was held", n, now.Add(55*time.Second))
	}
	if got := f.l.Held(); got != 0 {
		t.Errorf("%d locks held during the shutdown, want 0", got)
	}

	f.l.EmitPrepareForShutdown(false, "reboot")
	f.rec.WaitNotices(t, "no notice", none)
	if err := f.l.WaitHeld(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
}

// TestLogindMissingAtStart: without logind on the bus the source reports
// LogindUnavailable and no notice, and takes the lock as soon as logind
// comes.
func TestLogindMissingAtStart(t *testing.T) {
	address := logindtest.StartBus(t)
	rec := newRecorder()
	run(t, logind.New(logind.Options{Address: address, RetryMin: time.Hour}), rec)

	p := waitProblems(t, rec, logind.ReasonLogindUnavailable)[0]
	if !strings.Contains(p.Message, "systemd-logind") {
		t.Errorf("message %q does not name systemd-logind", p.Message)
	}
	if h := notices(rec); len(h) != 0 {
		t.Errorf("notices reported %+v before logind was read, want none", h)
	}

	// RetryMin is an hour: only logind's coming on the bus can wake it.
	l := logindtest.Start(t, address)
	if err := l.WaitHeld(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	waitProblems(t, rec)
	rec.WaitNotices(t, "no notice", none)
}

// TestLogindRestart: when logind leaves the bus the source reports it, and
// takes a lock from the new logind when it comes.
func TestLogindRestart(t *testing.T) {
	f := newFixture(t, func(o *logind.Options) { o.RetryMin = time.Hour })
	run(t, f.src, f.rec)
	ctx := waitCtx(t)
	if err := f.l.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitProblems(t, f.rec)

	f.l.Stop()
	waitProblems(t, f.rec, logind.ReasonLogindUnavailable)
	l2 := logindtest.StartConfig(t, f.bus.Address, logindtest.Config{InhibitDelayMax: time.Minute})
	if err := l2.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitProblems(t, f.rec)
}

// TestBusRestart: when the bus goes the source reports BusUnavailable,
// and when it is back it takes a lock from logind there and releases the
// old one.
func TestBusRestart(t *testing.T) {
	f := newFixture(t, nil)
	run(t, f.src, f.rec)
	ctx := waitCtx(t)
	if err := f.l.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The stand-in counts the lock once it sent it; the source has it once
	// it reported.
	f.rec.WaitNotices(t, "no notice", none)

	f.bus.Stop()
	p := waitProblems(t, f.rec, logind.ReasonBusUnavailable)[0]
	if !strings.Contains(p.Message, f.bus.Address) {
		t.Errorf("message %q does not name the bus %s", p.Message, f.bus.Address)
	}
	if got := f.l.Held(); got != 1 {
		t.Errorf("%d locks held while the bus is away, want the lock kept", got)
	}

	f.bus.Start()
	l2 := logindtest.StartConfig(t, f.bus.Address, logindtest.Config{InhibitDelayMax: time.Minute})
	if err := l2.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := f.l.WaitReleased(ctx); err != nil {
		t.Fatalf("the lock from before the restart was kept: %v", err)
	}
	waitProblems(t, f.rec)

	l2.EmitPrepareForShutdown(true, "reboot")
	f.rec.WaitNotices(t, "a notice from logind on the new bus", one)
}

// TestRunReleasesOnReturn: the lock goes when Run's context ends.
func TestRunReleasesOnReturn(t *testing.T) {
	f := newFixture(t, nil)
	stop := run(t, f.src, f.rec)
	ctx := waitCtx(t)
	if err := f.l.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := f.l.WaitReleased(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBadOptions: Run returns an error for options it cannot use, at
// once.
func TestBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts logind.Options
		says string
	}{
		{"negative Want", logind.Options{Want: -time.Second}, "Want"},
		{"negative Margin", logind.Options{Margin: -time.Second}, "Margin"},
		{"unknown PoweroffMode", logind.Options{PoweroffMode: "Reboot"}, "PoweroffMode"},
		{"unknown RebootMode", logind.Options{RebootMode: "maintenance"}, "RebootMode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := waitCtx(t)
			err := logind.New(tc.opts).Run(ctx, newRecorder())
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Run: %v, want an error about %s", err, tc.says)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Run waited for its context: %v", err)
			}
		})
	}
}
