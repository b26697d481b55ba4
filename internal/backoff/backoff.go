// Package backoff is the one shape of vacate's pauses after a failed call
// to something it does not control: a pod's HTTP hook (internal/hook) and a
// cloud's metadata service (the agent's gcp and azure sources). From a
// first pause, each doubles up to a cap, and each is up to a fifth longer
// at random, so that callers that failed together (the hooks of a node's
// pods, the agents of a zone whose metadata service stalled) do not all
// call again at the same instant.
package backoff

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Jitter is how much longer than its step a pause may be, as a fraction.
const Jitter = 0.2

// New returns the pauses after consecutive failures: first, doubling up
// to limit (first when limit is shorter), each up to Jitter longer. Steps
// never run out. Start again with a new one after a success.
func New(first, limit time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: first, Factor: 2, Jitter: Jitter, Cap: max(limit, first), Steps: math.MaxInt32}
}

// Sleep waits d, or until ctx ends; it reports whether the whole of d
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
