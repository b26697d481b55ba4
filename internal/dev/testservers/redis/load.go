package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vacate-dev/vacate/internal/dev/testservers"
)

// LoadOptions shape a client load.
type LoadOptions struct {
	// Writers is the number of concurrent writers (default 2).
	Writers int
	// Interval is each writer's pause between two writes (default 5 ms).
	Interval time.Duration
	// WaitTimeout is WAIT's timeout (default 1 s): a write is acknowledged
	// only when WAIT 1 answers at least 1 within it.
	WaitTimeout time.Duration
}

// Load is a client load: writers that each SET a new key and then, on the
// same connection, WAIT 1; a write is acknowledged when WAIT answers at least
// 1 (a replica has it). Writers find the primary through the sentinels
// (go-redis's failover client) and retry on their own after any error.
type Load struct {
	c      *Cluster
	client *goredis.Client
	opts   LoadOptions
	prefix string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	acked     map[string]string
	perWriter []int
	tally     testservers.Tally
}

var loadSeq atomic.Int64

// StartLoad starts a client load; Stop ends it and judges it. The cluster's
// Stop ends it too.
func (c *Cluster) StartLoad(ctx context.Context, opts LoadOptions) *Load {
	if opts.Writers == 0 {
		opts.Writers = 2
	}
	if opts.Interval == 0 {
		opts.Interval = 5 * time.Millisecond
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{
		c: c,
		client: goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:       c.cfg.MasterName,
			SentinelAddrs:    c.SentinelAddrs(),
			Password:         c.cfg.Password,
			SentinelPassword: c.cfg.Password,
			MaxRetries:       -1,
			PoolSize:         opts.Writers + 2,
			DialTimeout:      time.Second,
			ReadTimeout:      opts.WaitTimeout + 2*time.Second,
			WriteTimeout:     time.Second,
		}),
		opts:      opts,
		prefix:    fmt.Sprintf("load%d", loadSeq.Add(1)),
		cancel:    cancel,
		acked:     map[string]string{},
		perWriter: make([]int, opts.Writers),
	}
	c.mu.Lock()
	c.loads = append(c.loads, l)
	c.mu.Unlock()
	for w := range opts.Writers {
		l.wg.Add(1)
		go l.write(ctx, w)
	}
	return l
}

func (l *Load) write(ctx context.Context, w int) {
	defer l.wg.Done()
	tick := time.NewTicker(l.opts.Interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		key := fmt.Sprintf("%s:%d:%d", l.prefix, w, seq)
		val := fmt.Sprintf("v%d", seq)
		start := time.Now()
		var wait *goredis.Cmd
		_, err := l.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, key, val, 0)
			wait = p.Do(ctx, "WAIT", 1, l.opts.WaitTimeout.Milliseconds())
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if n, _ := wait.Int(); n < 1 {
				err = fmt.Errorf("WAIT 1 answered %d", n)
			}
		}
		l.record(w, key, val, start, err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (l *Load) record(w int, key, val string, start time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tally.Record(start, err)
	if err == nil {
		l.acked[key] = val
		l.perWriter[w]++
	}
}

// Acked is how many writes each writer has had acknowledged so far.
func (l *Load) Acked() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.perWriter...)
}

// LongestOutageSince is the longest outage that ended after t (0 if none):
// what one phase of a test cost the clients.
func (l *Load) LongestOutageSince(t time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tally.LongestSince(t)
}

// WaitProgress waits until every writer has had n more writes acknowledged
// than when it was called: no writer is stuck (paused, or on a primary that
// is gone).
func (l *Load) WaitProgress(ctx context.Context, n int) error {
	from := l.Acked()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		now := l.Acked()
		done := true
		for w := range now {
			done = done && now[w]-from[w] >= n
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			last := l.tally.LastErr
			l.mu.Unlock()
			return fmt.Errorf("writers acknowledged %v since %v, waiting for %d more each (last error: %v): %w", now, from, n, last, ctx.Err())
		case <-tick.C:
		}
	}
}

func (l *Load) halt() {
	l.cancel()
	l.wg.Wait()
}

// Stop ends the load and reads every acknowledged key back from the primary
// the sentinels name: a key missing or with another value is lost.
func (l *Load) Stop(ctx context.Context) (testservers.Report, error) {
	l.halt()
	defer l.client.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.tally.Report("Redis with Sentinel (SET acknowledged by WAIT 1)", len(l.acked))
	keys := make([]string, 0, len(l.acked))
	for k := range l.acked {
		keys = append(keys, k)
	}
	for len(keys) > 0 {
		batch := keys[:min(500, len(keys))]
		keys = keys[len(batch):]
		vals, err := l.client.MGet(ctx, batch...).Result()
		if err != nil {
			return r, fmt.Errorf("reading the acknowledged keys back: %w", err)
		}
		for i, v := range vals {
			if s, ok := v.(string); !ok || s != l.acked[batch[i]] {
				r.Lost++
			}
		}
	}
	return r, nil
}
