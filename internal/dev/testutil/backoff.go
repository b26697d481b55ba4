package testutil

import (
	"testing"
	"time"
)

// CheckBackoff checks pauses recorded from internal/backoff: every pause
// between first and a fifth over the cap, the cap reached, and some pause
// off the plain doubling (jitter). what names the pauses in failures.
func CheckBackoff(t *testing.T, what string, pauses []time.Duration, first, limit time.Duration) {
	t.Helper()
	jittered, capped := false, false
	for _, d := range pauses {
		if d < first || d > limit+limit/5 {
			t.Errorf("%s: pause %s: want %s to %s", what, d, first, limit+limit/5)
		}
		capped = capped || d >= limit
		plain := false
		for step := first; step <= limit; step *= 2 {
			plain = plain || d == step
		}
		jittered = jittered || !plain
	}
	if !capped {
		t.Errorf("%s: pauses %v never reach the cap %s", what, pauses, limit)
	}
	if !jittered {
		t.Errorf("%s: pauses %v: each exactly a doubling of %s, no jitter", what, pauses, first)
	}
}
