package gcp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/agent/gcp"
	"github.com/vacate-dev/vacate/internal/dev/doubles/gcptest"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestRetriesBackOffWithJitter: while the metadata server does not answer,
// the source pauses as the HTTP hooks do (internal/backoff): from RetryMin,
// doubling up to RetryMax, each pause up to a fifth longer at random, so
// that the agents of a zone do not call a recovering server together. The
// pauses are recorded, not waited.
func TestRetriesBackOffWithJitter(t *testing.T) {
	s := gcptest.NewServer(t)
	s.Stop() // connection refused
	src := gcp.New(gcp.Options{Endpoint: s.URL(), RetryMin: time.Second, RetryMax: 8 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var pauses []time.Duration
	gcp.SetSleep(src, func(ctx context.Context, d time.Duration) bool {
		mu.Lock()
		defer mu.Unlock()
		if pauses = append(pauses, d); len(pauses) >= 40 {
			cancel()
		}
		return ctx.Err() == nil
	})
	if err := src.Run(ctx, &recorder{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	testutil.CheckBackoff(t, "reading metadata", pauses, time.Second, 8*time.Second)
}
