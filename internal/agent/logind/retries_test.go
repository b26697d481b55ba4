package logind

import (
	"testing"
	"time"
)

// TestRetriesBackOffWithJitter: the waits between retries of the bus and
// logind start at RetryMin, double up to retryMax, and are spread across a
// fleet by the jitter.
func TestRetriesBackOffWithJitter(t *testing.T) {
	o := Options{RetryMin: time.Second}
	b := o.retries()
	for i := range 7 {
		d := b.Step()
		low := min(time.Second<<i, retryMax)
		if d < low || float64(d) > float64(low)*(1+retryJitter) {
			t.Errorf("retry %d: %s, want %s to %.0f%% more", i, d, low, retryJitter*100)
		}
	}
	firsts := map[time.Duration]bool{}
	for range 20 {
		firsts[o.retries().Step()] = true
	}
	if len(firsts) < 2 {
		t.Errorf("20 agents would all retry after %v: no jitter", firsts)
	}
}
