package eviction

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

func newTokenBucket(qps float64, burst int) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(qps), burst)
}

// admit waits until the client may make an eviction call: past any
// throttling pause, then with a token of the shared bucket, both on the
// queue's clock. It reports false when ctx ends first.
func (q *Queue) admit(ctx context.Context) bool {
	for {
		if !q.sleep(ctx, q.pauseLeft()) {
			return false
		}
		now := q.opts.Clock.Now()
		res := q.bucket.ReserveN(now, 1)
		if !q.sleep(ctx, res.DelayFrom(now)) {
			res.CancelAt(q.opts.Clock.Now())
			return false
		}
		// A throttling answer that came while this call waited for its
		// token pauses it too; the token is spent.
		if q.pauseLeft() <= 0 {
			return true
		}
	}
}

// pause stops every eviction call until the throttling answer's
// Retry-After has passed (BaseDelay without one).
func (q *Queue) pause(o Outcome) {
	until := o.At.Add(max(o.RetryAfter, q.opts.BaseDelay))
	q.mu.Lock()
	if until.After(q.pausedUntil) {
		q.pausedUntil = until
	}
	q.mu.Unlock()
}

// pauseLeft is how long the throttling pause still lasts.
func (q *Queue) pauseLeft() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pausedUntil.Sub(q.opts.Clock.Now())
}

// sleep waits d on the queue's clock, and reports false if ctx ended first.
func (q *Queue) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := q.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
