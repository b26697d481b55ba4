package azure_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/agent/azure"
	"github.com/vacate-dev/vacate/internal/dev/doubles/azuretest"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestRetriesBackOffWithJitter: while IMDS does not answer, reading the
// VM's name and then Scheduled Events, the source pauses as the HTTP hooks
// do (internal/backoff): from Interval, doubling up to RetryMax, each
// pause up to a fifth longer at random; once it answers again, polls are
// Interval apart. The pauses are recorded, not waited.
func TestRetriesBackOffWithJitter(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	s.SetStatus(500)
	src := azure.New(azure.Options{Endpoint: s.URL(), Interval: time.Second, RetryMax: 8 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var pauses []time.Duration
	azure.SetSleep(src, func(ctx context.Context, d time.Duration) bool {
		mu.Lock()
		defer mu.Unlock()
		pauses = append(pauses, d)
		switch len(pauses) {
		case 20: // the VM's name is read: Scheduled Events fail too
			s.SetStatus(0)
		case 21:
			s.SetStatus(500)
		case 50: // answering again
			s.SetStatus(0)
		case 60:
			cancel()
		}
		return ctx.Err() == nil
	})
	if err := src.Run(ctx, &recorder{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pauses) < 60 {
		t.Fatalf("%d pauses: %v", len(pauses), pauses)
	}
	testutil.CheckBackoff(t, "reading the VM's name", pauses[:20], time.Second, 8*time.Second)
	testutil.CheckBackoff(t, "reading scheduled events", pauses[22:50], time.Second, 8*time.Second)
	for i, d := range pauses[52:] {
		if d != time.Second {
			t.Errorf("pause %d after IMDS answered again: %s, want the interval 1s", 52+i, d)
		}
	}
}
