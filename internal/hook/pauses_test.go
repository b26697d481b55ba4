package hook

import (
	"testing"
	"time"
)

// TestPausesDoubleWithJitterUpToTheCap: the waits after failed calls start
// at Backoff, double, never pass MaxBackoff by more than the jitter, and
// are spread (not all the same for conversations that fail together).
func TestPausesDoubleWithJitterUpToTheCap(t *testing.T) {
	p := &Prober{Backoff: time.Second, MaxBackoff: 8 * time.Second}
	b := p.pauses()
	prev := time.Duration(0)
	for i := range 8 {
		d := b.Step()
		low := min(time.Second<<i, 8*time.Second)
		if d < low || d > low+low/5 {
			t.Errorf("pause %d: %s, want %s to %s", i, d, low, low+low/5)
		}
		if i < 3 && d <= prev {
			t.Errorf("pause %d: %s, not longer than %s", i, d, prev)
		}
		prev = d
	}
	firsts := map[time.Duration]bool{}
	for range 20 {
		firsts[p.pauses().Step()] = true
	}
	if len(firsts) < 2 {
		t.Errorf("20 conversations failing together would all wait %v: no jitter", firsts)
	}
}
