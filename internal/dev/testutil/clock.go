package testutil

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// ShiftedClock is the real clock moved ahead by an offset the test sets:
// time flows as usual (tickers, sleeps and backoffs take real time), and
// Shift jumps to a later moment, such as into a maintenance window, firing
// the AfterFunc timers the jump made due. It lets a test run a controller
// against a real cluster while choosing what time it is.
type ShiftedClock struct {
	clock.RealClock
	mu     sync.Mutex
	offset time.Duration
	timers map[*shiftedTimer]bool
}

// NewShiftedClock starts at now plus offset.
func NewShiftedClock(offset time.Duration) *ShiftedClock {
	return &ShiftedClock{offset: offset, timers: map[*shiftedTimer]bool{}}
}

// Now is the real time plus the offset.
func (c *ShiftedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.RealClock.Now().Add(c.offset)
}

// Since is the shifted time since t.
func (c *ShiftedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Shift moves the clock ahead by d and fires the timers now due.
func (c *ShiftedClock) Shift(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	now := c.RealClock.Now().Add(c.offset)
	var due []*shiftedTimer
	for t := range c.timers {
		if !t.due.After(now) {
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		go t.fire()
	}
}

// AfterFunc runs f when the shifted clock reaches now+d, by real time or by
// a Shift, whichever comes first.
func (c *ShiftedClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &shiftedTimer{c: c, f: f}
	t.arm(d)
	return t
}

type shiftedTimer struct {
	c    *ShiftedClock
	f    func()
	due  time.Time
	real clock.Timer
	gen  int // a fire from an earlier arming does nothing
}

func (t *shiftedTimer) arm(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.gen++
	gen := t.gen
	t.due = t.c.RealClock.Now().Add(t.c.offset + d)
	t.c.timers[t] = true
	t.real = t.c.RealClock.AfterFunc(d, func() { t.fireGen(gen) })
}

func (t *shiftedTimer) fire() {
	t.c.mu.Lock()
	gen := t.gen
	t.c.mu.Unlock()
	t.fireGen(gen)
}

func (t *shiftedTimer) fireGen(gen int) {
	t.c.mu.Lock()
	if gen != t.gen || !t.c.timers[t] {
		t.c.mu.Unlock()
		return
	}
	delete(t.c.timers, t)
	t.c.mu.Unlock()
	t.f()
}

func (t *shiftedTimer) C() <-chan time.Time { return nil } // AfterFunc timers have no channel

func (t *shiftedTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	pending := t.c.timers[t]
	delete(t.c.timers, t)
	t.real.Stop()
	return pending
}

func (t *shiftedTimer) Reset(d time.Duration) bool {
	pending := t.Stop()
	t.arm(d)
	return pending
}
