package hook

import (
	"testing"
	"time"
)

// TestPausesFollowTheProbersBounds: the waits after failed calls are the
// shared backoff (internal/backoff tests its doubling and jitter) between
// the Prober's Backoff and MaxBackoff.
func TestPausesFollowTheProbersBounds(t *testing.T) {
	p := &Prober{Backoff: time.Second, MaxBackoff: 4 * time.Second}
	b := p.pauses()
	for i, low := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if d := b.Step(); d < low || d > low+low/5 {
			t.Errorf("pause %d: %s, want %s to %s", i, d, low, low+low/5)
		}
	}
}
