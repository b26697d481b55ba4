// Package reports records what an agent's notice source reports (it is an
// agent.Reporter), for the sources' tests, and waits for a report.
package reports

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/agent"
)

// waitTimeout bounds every wait: generous, so a busy machine makes a test
// slower, never wrong.
const waitTimeout = 30 * time.Second

// Run runs src until the test ends, reporting to a new Recorder, which it
// returns. When the test ends Run cancels the source's context and fails
// the test unless the source returns nil within five seconds.
func Run(t testing.TB, src agent.Source) *Recorder {
	t.Helper()
	r := &Recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, r) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run returned %v when its context ended, want nil", src.Name(), err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: Run did not return when its context ended", src.Name())
		}
	})
	return r
}

// Recorder keeps every call of a source. Its zero value is ready; its
// methods may be called from any goroutine.
type Recorder struct {
	mu       sync.Mutex
	notices  [][]agent.Notice
	problems [][]agent.Problem
	changed  chan struct{} // closed at the next report; nil until a wait
}

// Notices records one report of the notices.
func (r *Recorder) Notices(ns []agent.Notice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notices = append(r.notices, slices.Clone(ns))
	r.wakeLocked()
}

// Problems records one report of the problems.
func (r *Recorder) Problems(ps []agent.Problem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, slices.Clone(ps))
	r.wakeLocked()
}

// wakeLocked wakes the waits: a report came.
func (r *Recorder) wakeLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// History returns copies of the reports so far, oldest first.
func (r *Recorder) History() ([][]agent.Notice, [][]agent.Problem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notices), slices.Clone(r.problems)
}

// WaitFor waits until cond holds for the reports so far, looking again at
// each report (no polling); a timeout says what was reported.
func (r *Recorder) WaitFor(t testing.TB, what string, cond func(notices [][]agent.Notice, problems [][]agent.Problem) bool) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		r.mu.Lock()
		notices, problems := slices.Clone(r.notices), slices.Clone(r.problems)
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed := r.changed
		r.mu.Unlock()
		if cond(notices, problems) {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("waiting %s for %s:\nnotices reported: %s\nproblems reported: %+v", waitTimeout, what, Describe(notices), problems)
		}
	}
}

// WaitNotices waits until the last Notices call satisfies ok, and returns it.
func (r *Recorder) WaitNotices(t testing.TB, what string, ok func([]agent.Notice) bool) []agent.Notice {
	t.Helper()
	var last []agent.Notice
	r.WaitFor(t, what, func(ns [][]agent.Notice, _ [][]agent.Problem) bool {
		if len(ns) == 0 {
			return false
		}
		last = ns[len(ns)-1]
		return ok(last)
	})
	return last
}

// WaitProblems waits until the last Problems call satisfies ok, and
// returns it.
func (r *Recorder) WaitProblems(t testing.TB, what string, ok func([]agent.Problem) bool) []agent.Problem {
	t.Helper()
	var last []agent.Problem
	r.WaitFor(t, what, func(_ [][]agent.Notice, ps [][]agent.Problem) bool {
		if len(ps) == 0 {
			return false
		}
		last = ps[len(ps)-1]
		return ok(last)
	})
	return last
}

// Describe lists reports of notices, one report a line.
func Describe(reports [][]agent.Notice) string {
	var b strings.Builder
	for _, ns := range reports {
		b.WriteString("\n  [")
		for _, n := range ns {
			fmt.Fprintf(&b, " %+v", n)
		}
		b.WriteString(" ]")
	}
	return b.String()
}
