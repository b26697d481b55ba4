package agent

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// SignalSource is the signal mode, for init systems without logind and for
// a systemd unit ordered to stop before kubelet (its stop sends SIGTERM):
// the first signal on Signals is a notice "sigterm" with a deadline of
// Deadline from then; when the node is Drained or the deadline comes,
// Finish closes Done, and the program exits.
type SignalSource struct {
	// Signals delivers the signals (signal.Notify for SIGTERM).
	Signals <-chan os.Signal
	// Deadline is how long the agent may hold the stop.
	Deadline time.Duration
	// Mode of the drain (default Maintenance: the machine stops, then
	// comes back).
	Mode v1alpha1.DrainMode
	// Now is the clock (default time.Now).
	Now func() time.Time

	once sync.Once
	done chan struct{}
}

// Name is "signal".
func (s *SignalSource) Name() string { return "signal" }

// Done is closed when the agent is done with the signal's notice.
func (s *SignalSource) Done() <-chan struct{} {
	s.init()
	return s.done
}

func (s *SignalSource) init() {
	s.once.Do(func() { s.done = make(chan struct{}) })
}

// Run reports no notice until the first signal, then the notice.
func (s *SignalSource) Run(ctx context.Context, r Reporter) error {
	s.init()
	now, mode := s.Now, s.Mode
	if now == nil {
		now = time.Now
	}
	if mode == "" {
		mode = v1alpha1.ModeMaintenance
	}
	r.Notices(nil)
	select {
	case <-ctx.Done():
		return nil
	case sig := <-s.Signals:
		at := now()
		r.Notices([]Notice{{
			Source:   "sigterm",
			Mode:     mode,
			Deadline: at.Add(s.Deadline),
			Reason:   "vacate-agent received " + sig.String() + " (the node is stopping); it holds the stop until the node is drained or for " + s.Deadline.String(),
		}})
	}
	<-ctx.Done()
	return nil
}

// Finish ends the signal mode: Done is closed.
func (s *SignalSource) Finish(context.Context, Notice, bool) error {
	s.init()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	return nil
}

// NoticeSources: the signal mode reports "sigterm".
func (s *SignalSource) NoticeSources() []string { return []string{"sigterm"} }
