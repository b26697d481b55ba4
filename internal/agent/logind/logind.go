// Package logind is the agent's source for shutdowns and reboots on
// machines with systemd-logind. It holds a delay inhibitor lock on
// shutdown, so that logind, when asked to shut down or reboot, says so
// (PrepareForShutdown) and then waits, up to its InhibitDelayMaxSec=, until
// the lock is released. The source turns that into a notice "shutdown" and
// releases the lock when the agent finishes it.
//
// The source never changes the machine's configuration: when logind's
// InhibitDelayMaxSec= is shorter than the drain needs, it reports a
// problem that says how to raise it.
package logind

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
)

// NoticeSource is the Source of the notices: a shutdown of any kind.
const NoticeSource = "shutdown"

// Reasons of the source's problems.
const (
	// ReasonInhibitDelayTooShort: logind waits for delay locks less than
	// Options.Want.
	ReasonInhibitDelayTooShort = "InhibitDelayTooShort"
	// ReasonBusUnavailable: the D-Bus system bus does not answer.
	ReasonBusUnavailable = "BusUnavailable"
	// ReasonLogindUnavailable: systemd-logind is not on the bus.
	ReasonLogindUnavailable = "LogindUnavailable"
	// ReasonInhibitFailed: logind refused the inhibitor lock.
	ReasonInhibitFailed = "InhibitFailed"
)

// Defaults of Options.
const (
	DefaultMargin   = 5 * time.Second
	DefaultRetryMin = time.Second
	// retryMax bounds the wait between retries.
	retryMax = 30 * time.Second
	// retryJitter spreads the retries of a fleet's agents after a dbus or
	// logind restart on every node.
	retryJitter = 0.2
)

// Options configure a Source.
type Options struct {
	// Address is the D-Bus address of the bus logind is on (empty: the
	// system bus).
	Address string
	// Want is the time the agent would like for a drain before the machine
	// goes: a logind inhibit delay shorter than that is a problem. Zero
	// checks nothing.
	Want time.Duration
	// Margin is taken off logind's inhibit delay for a notice's deadline,
	// so the drain is done before logind stops waiting (default 5s).
	Margin time.Duration
	// PoweroffMode is the drain's mode when the machine powers off or
	// halts, or the kind of shutdown is unknown (default Decommission).
	PoweroffMode v1alpha1.DrainMode
	// RebootMode is the drain's mode when the machine reboots (a reboot,
	// kexec or soft-reboot; default Maintenance).
	RebootMode v1alpha1.DrainMode
	// RetryMin is the first wait before a retry when the bus or logind
	// fails, doubled after each failure up to 30s (default 1s).
	RetryMin time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log receives what the source does and why it retries.
	Log logr.Logger
}

// Source is the logind source. Run must not be called again before an
// earlier Run has returned.
type Source struct {
	opts Options

	// mu guards lock and current: Finish runs on the agent's goroutines.
	mu sync.Mutex
	// lock is the delay inhibitor lock's file descriptor; nil while not
	// held. Closing it releases the lock.
	lock *os.File
	// current is the shutdown under way, nil when there is none.
	current *shutdown
}

// shutdown is a shutdown logind prepares for.
type shutdown struct {
	// kind is logind's name for it ("reboot", "poweroff", ...), empty
	// when unknown.
	kind string
	// fromMetadata: kind came from PrepareForShutdownWithMetadata.
	fromMetadata bool
	// at is when the source learnt of it.
	at time.Time
	// delay is logind's InhibitDelayMaxUSec then.
	delay time.Duration
	// locked: the source held the lock when the shutdown started, so
	// logind waits for it.
	locked bool
	// finished: Finish released the lock for it.
	finished bool
	// via says how the source learnt of it, for the notice's reason.
	via string
}

var _ interface {
	agent.Source
	agent.Finisher
} = (*Source)(nil)

// New returns a logind source; Run starts it.
func New(opts Options) *Source {
	if opts.Margin == 0 {
		opts.Margin = DefaultMargin
	}
	if opts.PoweroffMode == "" {
		opts.PoweroffMode = v1alpha1.ModeDecommission
	}
	if opts.RebootMode == "" {
		opts.RebootMode = v1alpha1.ModeMaintenance
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Source{opts: opts}
}

// Name is "logind".
func (s *Source) Name() string { return "logind" }

// validate checks what Run cannot use.
func (o Options) validate() error {
	var errs []error
	if o.Want < 0 {
		errs = append(errs, fmt.Errorf("logind: Want is %s: it must not be negative", o.Want))
	}
	if o.Margin < 0 {
		errs = append(errs, fmt.Errorf("logind: Margin is %s: it must not be negative", o.Margin))
	}
	modes := []v1alpha1.DrainMode{v1alpha1.ModeMaintenance, v1alpha1.ModeDecommission}
	if !slices.Contains(modes, o.PoweroffMode) {
		errs = append(errs, fmt.Errorf("logind: PoweroffMode %q is not a drain mode: use %s or %s", o.PoweroffMode, v1alpha1.ModeMaintenance, v1alpha1.ModeDecommission))
	}
	if !slices.Contains(modes, o.RebootMode) {
		errs = append(errs, fmt.Errorf("logind: RebootMode %q is not a drain mode: use %s or %s", o.RebootMode, v1alpha1.ModeMaintenance, v1alpha1.ModeDecommission))
	}
	return errors.Join(errs...)
}

// Finish releases the inhibitor lock, so the shutdown goes on. It is
// idempotent, and does nothing when no shutdown is under way.
func (s *Source) Finish(_ context.Context, n agent.Notice, drained bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil || s.current.finished {
		return nil
	}
	s.current.finished = true
	s.opts.Log.Info("releasing the shutdown inhibitor lock", "drained", drained, "reason", n.Reason)
	return s.releaseLocked()
}

// releaseLocked closes the lock, if held; s.mu is held.
func (s *Source) releaseLocked() error {
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	if err != nil {
		return fmt.Errorf("releasing the logind inhibitor lock: %w", err)
	}
	return nil
}

// swapLock makes f the lock and releases the one held before, if any.
func (s *Source) swapLock(f *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.releaseLocked(); err != nil {
		s.opts.Log.Error(err, "releasing the previous inhibitor lock")
	}
	s.lock = f
}

// release releases the lock, if held.
func (s *Source) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.releaseLocked(); err != nil {
		s.opts.Log.Error(err, "releasing the inhibitor lock")
	}
}

// held says whether the lock is held.
func (s *Source) held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock != nil
}

// start records a shutdown of the given kind ("" when unknown), learnt of
// via how. A shutdown already under way takes the kind of a
// PrepareForShutdownWithMetadata (logind's own word) unless it was
// finished.
func (s *Source) start(kind string, fromMetadata bool, delay time.Duration, via string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.current; c != nil {
		if fromMetadata && !c.fromMetadata && !c.finished && kind != "" {
			c.kind, c.fromMetadata = kind, true
		}
		return
	}
	s.current = &shutdown{
		kind:         kind,
		fromMetadata: fromMetadata,
		at:           s.opts.Now(),
		delay:        delay,
		locked:       s.lock != nil,
		via:          via,
	}
}

// cancel forgets the shutdown under way, if any.
func (s *Source) cancel() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = nil
}

// preparing says whether a shutdown is under way, and whether the agent
// finished it.
func (s *Source) preparing() (underway, finished bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		return false, false
	}
	return true, s.current.finished
}

// notices are the source's notices now.
func (s *Source) notices() []agent.Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.current
	if c == nil {
		return []agent.Notice{}
	}
	mode, what := s.opts.PoweroffMode, "shutting down (kind unknown)"
	switch c.kind {
	case "reboot":
		mode, what = s.opts.RebootMode, "rebooting"
	case "kexec":
		mode, what = s.opts.RebootMode, "rebooting with kexec"
	case "soft-reboot":
		mode, what = s.opts.RebootMode, "soft-rebooting"
	case "poweroff":
		what = "powering off"
	case "halt":
		what = "halting"
	case "":
	default:
		what = "shutting down (" + c.kind + ")"
	}
	wait := max(c.delay-s.opts.Margin, 0)
	reason := fmt.Sprintf("the machine is %s (%s); logind waits at most %s", what, c.via, c.delay)
	if !c.locked {
		reason += ", but vacate-agent held no inhibitor lock when the shutdown started, so logind may not wait for the drain"
	}
	return []agent.Notice{{
		Source:   NoticeSource,
		Mode:     mode,
		Deadline: c.at.Add(wait),
		Reason:   reason,
	}}
}

// NoticeSources: logind reports "shutdown".
func (s *Source) NoticeSources() []string { return []string{NoticeSource} }

// retries is the backoff between retries: from RetryMin, doubling up to
// retryMax, each wait up to retryJitter longer (apimachinery's wait.Backoff).
func (o Options) retries() *wait.Backoff {
	return &wait.Backoff{Duration: o.RetryMin, Factor: 2, Jitter: retryJitter, Cap: retryMax, Steps: math.MaxInt32}
}
