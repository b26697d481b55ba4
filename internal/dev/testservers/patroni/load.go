package patroni

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vacate-dev/vacate/internal/dev/testservers"
)

// loadTable holds the load's rows: one per committed transaction.
const loadTable = "vacate_load"

// Load is a client committing small transactions continuously to whichever
// member accepts writes, one row with a new id per transaction, through the
// cluster's multi-host connection string (target_session_attrs=read-write):
// after an error it drops its connection and connects again, which finds the
// current primary. It records every id whose COMMIT was acknowledged.
type Load struct {
	c      *Cluster
	cancel context.CancelFunc
	done   chan struct{}
	// interval is the pause between two transactions.
	interval time.Duration

	mu    sync.Mutex
	acked []int64
	tally testservers.Tally
}

// StartLoad creates the load's table and starts committing, one transaction
// every interval (10 ms when 0), until Stop.
func (c *Cluster) StartLoad(ctx context.Context, interval time.Duration) (*Load, error) {
	if interval == 0 {
		interval = 10 * time.Millisecond
	}
	conn, err := c.connectPrimary(ctx)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+loadTable+" (id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())")
	conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("creating the load's table: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l := &Load{c: c, cancel: cancel, done: make(chan struct{}), interval: interval}
	go l.run(runCtx)
	return l, nil
}

func (c *Cluster) connectPrimary(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return nil, fmt.Errorf("connecting to the primary: %w", err)
	}
	return conn, nil
}

func (l *Load) run(ctx context.Context) {
	defer close(l.done)
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for id := int64(1); ctx.Err() == nil; id++ {
		start := time.Now()
		err := func() error {
			if conn == nil {
				c, err := l.c.connectPrimary(ctx)
				if err != nil {
					return err
				}
				conn = c
			}
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := conn.Exec(tctx, "INSERT INTO "+loadTable+" (id) VALUES ($1)", id)
			return err
		}()
		if ctx.Err() != nil && err != nil {
			return // stopped mid-attempt: neither acknowledged nor a failure
		}
		l.record(id, start, err)
		if err != nil && conn != nil {
			conn.Close(context.Background())
			conn = nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(l.interval):
		}
	}
}

func (l *Load) record(id int64, start time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tally.Record(start, err)
	if err == nil {
		l.acked = append(l.acked, id)
	}
}

// Acked is the number of transactions committed so far.
func (l *Load) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// WaitAcked waits until n more transactions than now have been committed:
// proof that the client writes again.
func (l *Load) WaitAcked(ctx context.Context, n int) error {
	target := l.Acked() + n
	return poll(ctx, 60*time.Second, func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.acked) >= target, fmt.Sprintf("%d of %d commits, last error: %v", len(l.acked), target, l.tally.LastErr)
	})
}

// Stop stops the client and checks every acknowledged id against the
// current primary: each must be there exactly once.
func (l *Load) Stop(ctx context.Context) (testservers.Report, error) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.tally.Report("PostgreSQL under Patroni (transactions committed)", len(l.acked))
	if since := l.tally.FailingSince; !since.IsZero() {
		return r, fmt.Errorf("the load ended while failing (since %s): %w", since.Format(time.RFC3339Nano), l.tally.LastErr)
	}
	counts, err := l.c.readLoad(ctx)
	if err != nil {
		return r, err
	}
	for _, id := range l.acked {
		switch n := counts[id]; {
		case n == 0:
			r.Lost++
		case n > 1:
			r.Duplicated++
		}
	}
	return r, nil
}

// readLoad counts the load's rows by id on the current primary.
func (c *Cluster) readLoad(ctx context.Context) (map[int64]int, error) {
	var counts map[int64]int
	err := poll(ctx, 30*time.Second, func() (bool, string) {
		conn, err := c.connectPrimary(ctx)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(ctx, "SELECT id, count(*) FROM "+loadTable+" GROUP BY id")
		if err != nil {
			return false, err.Error()
		}
		defer rows.Close()
		counts = map[int64]int{}
		for rows.Next() {
			var id, n int64
			if err := rows.Scan(&id, &n); err != nil {
				return false, err.Error()
			}
			counts[id] = int(n)
		}
		if err := rows.Err(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err != nil {
		return nil, fmt.Errorf("reading the load's rows: %w", err)
	}
	return counts, nil
}
