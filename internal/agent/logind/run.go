package logind

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/internal/agent"
)

// Run holds the inhibitor lock and reports a notice while logind prepares
// for a shutdown, until ctx ends; then it releases the lock. When the bus
// or logind fails it reports a problem and retries, with backoff; it
// returns an error only for Options it cannot use.
//
// A shutdown under way when Run starts (logind's PreparingForShutdown) is
// reported at once, with a deadline counted from then: logind refuses new
// locks during a shutdown, so the drain may have less time than that.
func (s *Source) Run(ctx context.Context, r agent.Reporter) error {
	if err := s.opts.validate(); err != nil {
		return err
	}
	defer s.release()
	rep := &reports{r: r, source: s.Name()}
	retries := s.opts.retries()
	for {
		armed, err := s.session(ctx, rep)
		if ctx.Err() != nil {
			return nil
		}
		if armed {
			retries = s.opts.retries()
		}
		retry := retries.Step()
		rep.setUnavailable(ReasonBusUnavailable, fmt.Sprintf(
			"vacate-agent cannot use the D-Bus system bus%s (%v), so it cannot hold shutdowns for a drain; it retries with backoff. "+
				"Check that dbus is running and that the agent can reach its socket (/run/dbus/system_bus_socket)",
			s.where(), err))
		rep.flush(s.notices())
		s.opts.Log.Info("retrying the bus", "error", err.Error(), "after", retry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// where names the bus's address when it is not the system bus.
func (s *Source) where() string {
	if s.opts.Address == "" {
		return ""
	}
	return " at " + s.opts.Address
}

// session is one connection to the bus: it returns when the connection is
// lost (armed: logind was reached on it) or ctx ends.
func (s *Source) session(ctx context.Context, rep *reports) (armed bool, err error) {
	sigs := make(chan *dbus.Signal, 16)
	m, err := connect(ctx, s.opts.Address, sigs)
	if err != nil {
		return false, err
	}
	defer m.conn.Close()
	ss := &session{Source: s, m: m, rep: rep, backoff: s.opts.retries()}
	defer ss.stopRetry()
	ss.arm(ctx)
	for {
		rep.flush(s.notices())
		select {
		case <-ctx.Done():
			return ss.armed, ctx.Err()
		case <-m.conn.Context().Done():
			return ss.armed, errors.New("the connection to the bus was lost")
		case <-ss.retry:
			ss.retry = nil
			ss.arm(ctx)
		case sig, ok := <-sigs:
			if !ok {
				return ss.armed, errors.New("the connection to the bus was lost")
			}
			ss.handle(ctx, sig)
		}
	}
}

// session is the state of one connection.
type session struct {
	*Source
	m   *manager
	rep *reports
	// armed: logind was reached on this connection.
	armed bool
	// delay is logind's InhibitDelayMaxUSec, once read.
	delay time.Duration
	// owner is logind's unique name on the bus, once known: only its
	// signals count.
	owner string
	// retry fires when it is time to try logind again; nil when no retry
	// is due.
	retry   <-chan time.Time
	timer   *time.Timer
	backoff *wait.Backoff
}

// arm reads logind's state and takes the lock: after (re)connecting, and
// when logind (re)appears on the bus. The lock held before, if any, is
// released once the new one is held.
func (ss *session) arm(ctx context.Context) {
	ss.stopRetry()
	owner, err := ss.m.owner(ctx)
	if err != nil {
		ss.failed(ctx, err, false)
		return
	}
	ss.owner = owner
	delay, err := ss.m.inhibitDelayMax(ctx)
	if err != nil {
		ss.failed(ctx, err, false)
		return
	}
	preparing, err := ss.m.preparingForShutdown(ctx)
	if err != nil {
		ss.failed(ctx, err, false)
		return
	}
	ss.delay = delay
	ss.armed = true
	ss.rep.setDelay(ss.checkDelay(delay))
	if preparing {
		// logind refuses locks during a shutdown: report it at once.
		if underway, _ := ss.preparing(); !underway {
			ss.start(ss.scheduledKind(ctx), false, delay, "logind was preparing for it when vacate-agent started")
		}
		ss.rep.setUnavailable("", "")
		ss.backoff = ss.opts.retries()
		return
	}
	ss.cancel()
	ss.lock(ctx)
}

// lock takes a new inhibitor lock and makes it the one held.
func (ss *session) lock(ctx context.Context) {
	f, err := ss.m.inhibit(ctx)
	switch {
	case errorName(err) == errOperationInProgress:
		// A shutdown began since PreparingForShutdown was read: its
		// PrepareForShutdown follows.
		ss.opts.Log.Info("logind refused the inhibitor lock: a shutdown is under way")
	case err != nil:
		ss.failed(ctx, err, true)
		return
	default:
		ss.swapLock(f)
		ss.opts.Log.V(1).Info("holding a delay inhibitor lock on shutdown", "inhibitDelayMax", ss.delay)
	}
	ss.rep.setUnavailable("", "")
	ss.backoff = ss.opts.retries()
}

// failed reports why logind could not be used (inhibit: it refused the
// lock) and schedules a retry; a lost connection is left to session.
func (ss *session) failed(ctx context.Context, err error, inhibit bool) {
	if ctx.Err() != nil || !ss.m.conn.Connected() {
		return
	}
	name := errorName(err)
	switch {
	case slices.Contains(notOnBus, name):
		ss.rep.setUnavailable(ReasonLogindUnavailable, fmt.Sprintf(
			"systemd-logind is not on the D-Bus system bus%s (%v), so vacate-agent cannot hold shutdowns for a drain; "+
				"it retries with backoff and as soon as logind appears. Check `systemctl status systemd-logind`",
			ss.where(), err))
	case inhibit:
		ss.rep.setUnavailable(ReasonInhibitFailed, fmt.Sprintf(
			"logind refused vacate-agent (%v), so it cannot hold shutdowns for a drain; it retries with backoff. "+
				"The agent must run as root, or be allowed org.freedesktop.login1.inhibit-delay-shutdown by polkit",
			err))
	default:
		ss.rep.setUnavailable(ReasonLogindUnavailable, fmt.Sprintf(
			"vacate-agent cannot use systemd-logind (%v), so it cannot hold shutdowns for a drain; it retries with backoff", err))
	}
	after := ss.backoff.Step()
	ss.opts.Log.Info("logind failed; retrying", "error", err.Error(), "after", after)
	ss.timer = time.NewTimer(after)
	ss.retry = ss.timer.C
}

// stopRetry cancels a scheduled retry.
func (ss *session) stopRetry() {
	if ss.timer != nil {
		ss.timer.Stop()
	}
	ss.timer, ss.retry = nil, nil
}

// handle handles one signal. Signals sent straight to the agent reach it
// whatever its match rules say, and the system bus lets any process send
// one, so only those of logind's owner count.
func (ss *session) handle(ctx context.Context, sig *dbus.Signal) {
	if sig.Name != signalNameOwnerChanged && (ss.owner == "" || sig.Sender != ss.owner || sig.Path != managerPath) {
		ss.opts.Log.Info("ignoring a signal that does not come from logind", "signal", sig.Name, "sender", sig.Sender, "path", sig.Path)
		return
	}
	switch sig.Name {
	case signalNameOwnerChanged:
		var name, oldOwner, owner string
		if sig.Sender != "org.freedesktop.DBus" || dbus.Store(sig.Body, &name, &oldOwner, &owner) != nil || name != busName {
			return
		}
		ss.owner = owner
		if owner == "" {
			ss.opts.Log.Info("systemd-logind left the bus")
			ss.failed(ctx, dbus.Error{Name: "org.freedesktop.DBus.Error.NameHasNoOwner", Body: []any{"systemd-logind left the bus"}}, false)
			return
		}
		ss.opts.Log.Info("systemd-logind is on the bus; taking the inhibitor lock")
		ss.backoff = ss.opts.retries()
		ss.arm(ctx)
	case signalPrepareWithMetadata:
		var active bool
		var metadata map[string]dbus.Variant
		if dbus.Store(sig.Body, &active, &metadata) != nil {
			return
		}
		kind, _ := metadata["type"].Value().(string)
		ss.prepare(ctx, active, kind, true)
	case signalPrepare:
		var active bool
		if dbus.Store(sig.Body, &active) != nil {
			return
		}
		ss.prepare(ctx, active, "", false)
	}
}

// prepare handles PrepareForShutdown (fromMetadata false) and
// PrepareForShutdownWithMetadata. systemd sends the latter first, so a
// PrepareForShutdown that comes alone means logind tells no kind: then it
// is read from ScheduledShutdown.
func (ss *session) prepare(ctx context.Context, active bool, kind string, fromMetadata bool) {
	if !active {
		if underway, _ := ss.preparing(); underway {
			ss.opts.Log.Info("the shutdown was cancelled")
		}
		ss.cancel()
		if !ss.held() {
			ss.lock(ctx)
		}
		return
	}
	underway, _ := ss.preparing()
	if !fromMetadata {
		if underway {
			return // PrepareForShutdownWithMetadata came first
		}
		kind = ss.scheduledKind(ctx)
	}
	ss.start(kind, fromMetadata, ss.delay, "logind PrepareForShutdown")
	ss.opts.Log.Info("logind prepares for a shutdown", "kind", kind)
}

// scheduledKind is ScheduledShutdown's kind, or "" when it cannot be read.
func (ss *session) scheduledKind(ctx context.Context) string {
	kind, err := ss.m.scheduledKind(ctx)
	if err != nil {
		ss.opts.Log.Info("cannot tell the kind of shutdown", "error", err.Error())
	}
	return kind
}

// checkDelay is the problem with logind's inhibit delay, if any.
func (s *Source) checkDelay(delay time.Duration) *agent.Problem {
	if s.opts.Want == 0 || delay >= s.opts.Want {
		return nil
	}
	return &agent.Problem{
		Source: s.Name(),
		Reason: ReasonInhibitDelayTooShort,
		Message: fmt.Sprintf(
			"logind waits at most %s for a shutdown inhibitor (InhibitDelayMaxUSec), and vacate-agent wants %s to drain the node: "+
				"raise InhibitDelayMaxSec= to at least %s in /etc/systemd/logind.conf or in a drop-in in /etc/systemd/logind.conf.d/ "+
				"and restart systemd-logind; vacate-agent never changes it itself",
			delay, s.opts.Want, s.opts.Want.Round(time.Second)),
	}
}

// reports is what the source reported, to report only changes.
type reports struct {
	r      agent.Reporter
	source string
	// unavailable is the problem reaching the bus or logind, if any.
	unavailable *agent.Problem
	// delay is the problem with logind's inhibit delay, if any.
	delay *agent.Problem
	// known: the notices are known (logind was read once).
	known bool

	sentNotices  []agent.Notice
	sentProblems []agent.Problem
	sent         bool
}

// setUnavailable sets the availability problem; an empty reason clears
// it.
func (rep *reports) setUnavailable(reason, message string) {
	if reason == "" {
		rep.unavailable = nil
		return
	}
	rep.unavailable = &agent.Problem{Source: rep.source, Reason: reason, Message: message}
}

// setDelay sets the problem with logind's inhibit delay (nil: none), and
// marks the notices known.
func (rep *reports) setDelay(p *agent.Problem) {
	rep.delay = p
	rep.known = true
}

// flush reports the problems, and the notices once known, when they
// changed since last reported.
func (rep *reports) flush(notices []agent.Notice) {
	problems := []agent.Problem{}
	for _, p := range []*agent.Problem{rep.unavailable, rep.delay} {
		if p != nil {
			problems = append(problems, *p)
		}
	}
	if !rep.sent || !slices.Equal(problems, rep.sentProblems) {
		rep.r.Problems(problems)
		rep.sentProblems = problems
	}
	if rep.known && (rep.sentNotices == nil || !slices.Equal(notices, rep.sentNotices)) {
		rep.r.Notices(notices)
		rep.sentNotices = notices
	}
	rep.sent = true
}
