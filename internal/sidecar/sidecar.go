package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/pkg/hookauth"
)

// DefaultMaxDrains is how many drains one sidecar follows at once, those
// Completed aside. A pod sees one drain at a time, rarely two (its node
// replaced under the same name); the bound keeps a confused caller from
// filling the state volume.
const DefaultMaxDrains = 16

// Options are what a Sidecar needs besides its configuration.
type Options struct {
	Log   *slog.Logger
	Clock clock.Clock
	// MaxDrains bounds the drains followed at once, DefaultMaxDrains when 0.
	MaxDrains int
	// Verifier, when set, serves the protocol only to the callers it
	// verifies (pkg/hookauth); others get 401 or 403 and change nothing.
	Verifier *hookauth.Verifier
	// Node, when set, is the pod's node: a drain that names another node is
	// refused (403).
	Node string
}

// Sidecar follows drains: one worker per drain runs its commands, and the
// protocol's calls read and change the drains' records.
type Sidecar struct {
	cfg    *Config
	store  *store
	log    *slog.Logger
	clock  clock.Clock
	max    int
	verify *hookauth.Verifier
	node   string
	// metrics count the commands run and the requests answered.
	metrics *metrics

	// ctx ends the workers (the sidecar is stopping); set by Start, and
	// ended by stop too.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	drains map[string]*drainState
}

// drainState is one drain: its record and its worker.
type drainState struct {
	rec *record
	// gen counts interruptions (mode raised, cancel): a step that finds it
	// changed drops its result.
	gen int
	// stop ends the command running now, if any.
	stop context.CancelFunc
	// wake ends a worker's pause early.
	wake    chan struct{}
	running bool
}

// New opens the state directory, so that a sidecar that cannot keep state
// refuses to start.
func New(cfg *Config, opts Options) (*Sidecar, error) {
	st, err := openStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxDrains <= 0 {
		opts.MaxDrains = DefaultMaxDrains
	}
	return &Sidecar{cfg: cfg, store: st, log: opts.Log, clock: opts.Clock, max: opts.MaxDrains,
		verify: opts.Verifier, node: opts.Node, metrics: newMetrics(), drains: map[string]*drainState{}}, nil
}

// Start resumes the drains recorded in the state directory. Their workers,
// and those started later, run until ctx ends; Wait waits for them.
func (s *Sidecar) Start(ctx context.Context) {
	s.ctx, s.stop = context.WithCancel(ctx)
	recs, errs := s.store.load()
	for _, err := range errs {
		s.log.Error("a state file could not be read; its drain is not resumed", "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		d := &drainState{rec: r, wake: make(chan struct{}, 1)}
		s.drains[r.Drain] = d
		s.log.Info("resuming a drain after a restart", "drain", r.Drain, "run", r.Run, "mode", r.Mode, "phase", r.Phase)
		if r.Phase == phaseEvacuating {
			r.Answer = inProgress("resumed after a restart: evacuate runs again (attempt %d)", r.Attempts+1)
		}
		s.ensureWorker(d)
	}
}

// Wait waits for the workers, once the context given to Start has ended.
func (s *Sidecar) Wait() { s.wg.Wait() }

func inProgress(format string, args ...any) Answer {
	return Answer{State: hook.InProgress, Message: hook.Summary(fmt.Sprintf(format, args...))}
}

// requestError is a request the sidecar refuses, with its HTTP status.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) error {
	return &requestError{status: status, msg: fmt.Sprintf(format, args...)}
}

// checkDrain is what every request about a drain must name well.
func checkDrain(d Drain) error {
	switch {
	case !idShape.MatchString(d.UID):
		return refuse(http.StatusBadRequest, "drain %q: want the drain's UID (letters, digits and dashes, at most 64)", hook.Summary(d.UID))
	case d.Run != "" && !idShape.MatchString(d.Run):
		return refuse(http.StatusBadRequest, "run %q: want the run's id (letters, digits and dashes, at most 64)", hook.Summary(d.Run))
	}
	return nil
}

// Evacuate starts a drain (POST). It is idempotent: a drain already
// followed is not started again; a higher mode whose steps differ starts
// those steps.
func (s *Sidecar) Evacuate(req Drain) (Answer, int, error) {
	if err := checkDrain(req); err != nil {
		return Answer{}, 0, err
	}
	if len(req.Node) > 253 || !nodeShape.MatchString(req.Node) {
		return Answer{}, 0, refuse(http.StatusBadRequest, "node %q: want the node's name", hook.Summary(req.Node))
	}
	if req.Mode != Maintenance && req.Mode != Decommission {
		return Answer{}, 0, refuse(http.StatusBadRequest, "mode %q: want Maintenance or Decommission", hook.Summary(req.Mode))
	}
	if s.node != "" && req.Node != s.node {
		return Answer{}, 0, refuse(http.StatusForbidden, "node %q: this sidecar serves a pod on node %s, and drains only that node", hook.Summary(req.Node), s.node)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.drains[req.UID]
	if !ok {
		if s.active() >= s.max {
			return Answer{}, 0, refuse(http.StatusServiceUnavailable, "this sidecar already follows %d drains, its limit", s.max)
		}
		r := &record{Drain: req.UID, Run: req.Run, Node: req.Node, Mode: req.Mode, Phase: phaseEvacuating,
			Answer: inProgress("starting the %s evacuation", req.Mode)}
		d = &drainState{rec: r, wake: make(chan struct{}, 1)}
		if err := s.save(d); err != nil {
			return Answer{}, 0, refuse(http.StatusInternalServerError, "%v", err)
		}
		s.drains[req.UID] = d
		s.log.Info("starting a drain", "drain", req.UID, "run", req.Run, "node", req.Node, "mode", req.Mode)
		s.ensureWorker(d)
		return s.answer(d), http.StatusAccepted, nil
	}
	r := d.rec
	if r.Phase == phaseCancelling {
		r.Next = &req
		r.Answer = inProgress("undoing the previous run of this drain first; this one starts after")
		_ = s.save(d)
		return s.answer(d), http.StatusAccepted, nil
	}
	if req.Run != "" && r.Run != "" && req.Run != r.Run {
		// A new run of the drain (it failed and was asked again, or was
		// asked again after a cancel): what the old run did may be undone
		// by now (a primary back where it was), so it starts afresh and
		// never answers with the old run's state. What was started stays
		// recorded, for a cancel to undo.
		s.log.Info("a new run of the drain: its evacuation starts afresh", "drain", r.Drain, "run", req.Run, "previousRun", r.Run, "mode", req.Mode)
		r.Run, r.Node, r.Mode = req.Run, req.Node, req.Mode
		r.Phase, r.Attempts, r.Evacuated = phaseEvacuating, 0, nil
		r.Answer = inProgress("run %s of this drain: starting the %s evacuation afresh", req.Run, req.Mode)
		s.interrupt(d)
		_ = s.save(d)
		return s.answer(d), http.StatusAccepted, nil
	}
	if req.Run != "" {
		r.Run = req.Run
	}
	if req.Mode == Decommission && r.Mode == Maintenance {
		r.Mode = Decommission
		set, _ := s.cfg.stepSet(Decommission)
		if !has(r.Evacuated, set) {
			s.log.Info("the drain's mode went up: running the Decommission steps", "drain", r.Drain)
			r.Phase, r.Attempts = phaseEvacuating, 0
			r.Answer = inProgress("the drain is now a Decommission: starting its evacuation")
			s.interrupt(d)
		}
	}
	_ = s.save(d)
	return s.answer(d), http.StatusOK, nil
}

// active is how many drains are followed and not Completed: a finished
// drain holds no slot (it stays known, so that a cancel still undoes it).
// Called with mu held.
func (s *Sidecar) active() int {
	n := 0
	for _, d := range s.drains {
		if d.rec.Phase != phaseCompleted {
			n++
		}
	}
	return n
}

// Status is a drain's state (GET).
func (s *Sidecar) Status(req Drain) (Answer, error) {
	if err := checkDrain(req); err != nil {
		return Answer{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.drains[req.UID]
	if !ok {
		return Answer{}, refuse(http.StatusNotFound, "drain %s is not known here", req.UID)
	}
	return s.answer(d), nil
}

// Cancel cancels a drain (DELETE): its running command is killed, and the
// cancel steps of what was started run in the background until they
// succeed. A drain not known here has nothing to undo.
func (s *Sidecar) Cancel(req Drain) (Answer, int, error) {
	if err := checkDrain(req); err != nil {
		return Answer{}, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.drains[req.UID]
	if !ok {
		return Answer{}, 0, refuse(http.StatusNotFound, "drain %s is not known here: nothing to undo", req.UID)
	}
	r := d.rec
	r.Next = nil
	if r.Phase != phaseCancelling {
		s.log.Info("cancelling a drain", "drain", r.Drain, "run", r.Run, "started", r.Started)
		r.Phase, r.Attempts = phaseCancelling, 0
		r.Answer = inProgress("cancelling: undoing %v", r.Started)
		s.interrupt(d)
		_ = s.save(d)
	}
	return s.answer(d), http.StatusAccepted, nil
}

// answer is a record's answer, naming its drain and run. Called with mu held.
func (s *Sidecar) answer(d *drainState) Answer {
	a := d.rec.Answer
	a.Drain, a.Run = d.rec.Drain, d.rec.Run
	if a.State == hook.Completed {
		a.Remaining = new(int64)
	}
	return a
}

// interrupt stops what the drain's worker does now, so it starts over from
// the record's new phase. Called with mu held.
func (s *Sidecar) interrupt(d *drainState) {
	d.gen++
	if d.stop != nil {
		d.stop()
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
	s.ensureWorker(d)
}

// ensureWorker starts the drain's worker unless it runs. Called with mu held.
func (s *Sidecar) ensureWorker(d *drainState) {
	if d.running || d.rec.Phase == phaseCompleted {
		return
	}
	d.running = true
	s.wg.Add(1)
	go s.work(d)
}

// save writes a record; a failure is logged and shown in its answer, and
// returned. Called with mu held.
func (s *Sidecar) save(d *drainState) error {
	d.rec.Updated = s.clock.Now().UTC()
	if err := s.store.save(d.rec); err != nil {
		s.log.Error("the drain's state could not be saved; a restart would not resume it", "drain", d.rec.Drain, "err", err)
		return err
	}
	return nil
}

// work runs a drain's phases until it is Completed, gone, or the sidecar
// stops.
func (s *Sidecar) work(d *drainState) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		phase, gen := d.rec.Phase, d.gen
		if s.ctx.Err() != nil || phase == phaseCompleted || s.drains[d.rec.Drain] != d {
			d.running = false
			s.mu.Unlock()
			return
		}
		ctx, stop := context.WithCancel(s.ctx)
		d.stop = stop
		s.mu.Unlock()
		var pause time.Duration
		switch phase {
		case phaseEvacuating:
			pause = s.evacuate(ctx, d, gen)
		case phaseWatching:
			pause = s.watch(ctx, d, gen)
		case phaseCancelling:
			pause = s.cancel(ctx, d, gen)
		}
		stop()
		if pause > 0 {
			s.sleep(d, pause)
		}
	}
}

// sleep pauses a worker until the pause ends, the drain is interrupted or
// the sidecar stops.
func (s *Sidecar) sleep(d *drainState, pause time.Duration) {
	select {
	case <-s.ctx.Done():
	case <-d.wake:
	case <-s.clock.After(pause):
	}
}

// step begins a step: under the lock, unless the drain was interrupted
// since gen, it runs f on the record and returns the drain as commands see
// it. ok is false when the step must not run.
func (s *Sidecar) step(d *drainState, gen int, f func(r *record)) (Drain, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.gen != gen || s.drains[d.rec.Drain] != d {
		return Drain{}, false
	}
	f(d.rec)
	return d.rec.drain(), true
}

// evacuate runs the evacuate commands of the drain's step set once.
func (s *Sidecar) evacuate(ctx context.Context, d *drainState, gen int) time.Duration {
	var set string
	var steps *Steps
	var attempt int
	drain, ok := s.step(d, gen, func(r *record) {
		set, steps = s.cfg.stepSet(r.Mode)
		r.Started = add(r.Started, set)
		r.Attempts++
		attempt = r.Attempts
		_ = s.save(d)
	})
	if !ok {
		return 0
	}
	if pause, done := s.runList(ctx, d, gen, drain, "evacuate", "", steps.Evacuate, attempt); !done {
		return pause
	}
	s.step(d, gen, func(r *record) {
		r.Evacuated = add(r.Evacuated, set)
		r.Attempts = 0
		if steps.Status == nil {
			r.Phase = phaseCompleted
			r.Answer = Answer{State: hook.Completed, Message: "evacuated: every evacuate command exited 0"}
		} else {
			r.Phase = phaseWatching
			r.Answer = inProgress("evacuate done; waiting for status to say Completed")
		}
		s.log.Info("evacuate done", "drain", r.Drain, "next", r.Phase)
		_ = s.save(d)
	})
	return 0
}

// runList runs a step's commands in order (of step set `of`, for a
// cancel). done is true when they all exited 0. Otherwise pause is how long
// the worker waits before the step runs again: retryInterval after a
// failure, shown in the drain's answer, or 0 when the step was interrupted
// (a cancel, the mode raised, the sidecar stopping: not the command's
// failure).
func (s *Sidecar) runList(ctx context.Context, d *drainState, gen int, drain Drain, step, of string, cmds []Command, attempt int) (pause time.Duration, done bool) {
	for i := range cmds {
		c := &cmds[i]
		if _, ok := s.step(d, gen, func(r *record) {
			if step == "evacuate" {
				r.Answer = inProgress("evacuate: running %s (command %d of %d, attempt %d)", c.Name(), i+1, len(cmds), attempt)
			}
		}); !ok {
			return 0, false
		}
		s.log.Info("running", "drain", drain.UID, "step", step, "of", of, "command", c.Name(), "attempt", attempt)
		o := s.run(ctx, c, drain, step)
		if o.err == nil {
			continue
		}
		if o.stopped {
			s.log.Info("the running command was stopped", "drain", drain.UID, "step", step, "command", c.Name())
			return 0, false
		}
		why := o.describe(c)
		s.log.Info("a command failed; its step runs again", "drain", drain.UID, "step", step, "why", why, "in", s.cfg.retryInterval)
		if _, ok := s.step(d, gen, func(r *record) {
			r.Answer = inProgress("%s: %s (attempt %d; again in %s)", step, why, attempt, s.cfg.retryInterval)
			_ = s.save(d)
		}); !ok {
			return 0, false
		}
		return s.cfg.retryInterval, false
	}
	return 0, true
}

// watch runs the status command once and records what it says.
func (s *Sidecar) watch(ctx context.Context, d *drainState, gen int) time.Duration {
	var c *Command
	drain, ok := s.step(d, gen, func(r *record) {
		_, steps := s.cfg.stepSet(r.Mode)
		c = steps.Status
	})
	if !ok {
		return 0
	}
	o := s.run(ctx, c, drain, "status")
	if o.stopped {
		return 0
	}
	var a Answer
	if o.err != nil {
		a = inProgress("status: %s", o.describe(c))
	} else if parsed, err := parseStatus(o.stdout); err != nil {
		a = inProgress("status: %s %v", c.Name(), err)
	} else {
		a = parsed
	}
	done := false
	s.step(d, gen, func(r *record) {
		changed := a != r.Answer
		if changed {
			s.log.Info("status", "drain", r.Drain, "state", a.State, "message", a.Message)
		}
		r.Answer = a
		if a.State == hook.Completed {
			r.Phase, done = phaseCompleted, true
		}
		if changed || done {
			_ = s.save(d)
		}
	})
	if done {
		return 0
	}
	return s.cfg.statusInterval
}

// cancel runs the cancel commands of each step set started, the last
// started first; when they all exit 0 the drain is forgotten, or the drain
// asked for meanwhile starts afresh.
func (s *Sidecar) cancel(ctx context.Context, d *drainState, gen int) time.Duration {
	var sets []string
	var attempt int
	drain, ok := s.step(d, gen, func(r *record) {
		sets = slices.Clone(r.Started)
		slices.Reverse(sets)
		r.Attempts++
		attempt = r.Attempts
	})
	if !ok {
		return 0
	}
	for _, set := range sets {
		if pause, done := s.runList(ctx, d, gen, drain, "cancel", set, s.cfg.steps(set).Cancel, attempt); !done {
			return pause
		}
	}
	s.step(d, gen, func(r *record) {
		if next := r.Next; next != nil {
			s.log.Info("cancel done; starting the drain asked for meanwhile", "drain", r.Drain, "run", next.Run, "mode", next.Mode)
			*r = record{Drain: next.UID, Run: next.Run, Node: next.Node, Mode: next.Mode, Phase: phaseEvacuating,
				Answer: inProgress("starting the %s evacuation", next.Mode)}
			_ = s.save(d)
			return
		}
		s.log.Info("cancel done; the drain is forgotten", "drain", r.Drain)
		if err := s.store.remove(r.Drain); err != nil {
			s.log.Error("the drain's state file could not be removed", "drain", r.Drain, "err", err)
		}
		delete(s.drains, r.Drain)
	})
	return 0
}
