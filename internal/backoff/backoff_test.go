package backoff

import (
	"context"
	"testing"
	"time"
)

// TestPausesDoubleWithJitterUpToTheCap: the pauses start at first, double,
// never pass the cap by more than the jitter, and are spread (not all the
// same for callers that fail together).
func TestPausesDoubleWithJitterUpToTheCap(t *testing.T) {
	b := New(time.Second, 8*time.Second)
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
		firsts[New(time.Second, 8*time.Second).Step()] = true
	}
	if len(firsts) < 2 {
		t.Errorf("20 callers failing together would all wait %v: no jitter", firsts)
	}
}

// TestCapShorterThanFirst: a cap below the first pause keeps the first,
// rather than shrinking the pauses to the cap.
func TestCapShorterThanFirst(t *testing.T) {
	b := New(time.Second, time.Millisecond)
	for i := range 4 {
		if d := b.Step(); d < time.Second || d > time.Second+time.Second/5 {
			t.Errorf("pause %d: %s, want 1s to 1.2s", i, d)
		}
	}
}

// TestSleepEndsWithItsContext: Sleep reports a context that ended before
// the pause was over.
func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep of an hour under an ended context: true, want false")
	}
	if !Sleep(context.Background(), 0) {
		t.Error("Sleep(0): false, want true")
	}
}
