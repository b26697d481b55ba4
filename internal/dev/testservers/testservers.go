// Package testservers runs real stateful servers (RabbitMQ, PostgreSQL under
// Patroni, Redis with Sentinel) as local processes, one per simulated pod on
// that pod's loopback IP, for the tests and benchmarks that prove the recipes
// of examples/ (docs/recipes). Each system has its own package below this
// one; this package holds what they share: what a client load saw, and free
// ports.
package testservers

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Report is what a client load saw, judged as a user would: every write the
// system acknowledged must be there afterwards.
type Report struct {
	// System names the system and what a write is, such as "RabbitMQ
	// (messages confirmed by the broker)".
	System string
	// Attempted counts the writes the client tried, Acked those the system
	// acknowledged (a publisher confirm, a commit, WAIT 1 answering 1).
	Attempted, Acked int
	// Lost counts acknowledged writes that are not there afterwards;
	// Duplicated those there more than once.
	Lost, Duplicated int
	// LongestOutage is the longest time, during the load, between a write
	// attempt that failed and the next one acknowledged: how long clients
	// could not write.
	LongestOutage time.Duration
	// OutageOpen says the clients' last outage had not ended when the load
	// stopped (they never wrote again, as to a queue whose only node is
	// gone): LongestOutage then counts it up to the stop, a lower bound.
	OutageOpen bool
	// Errors counts write attempts that failed (and were retried).
	Errors int
}

func (r Report) String() string {
	return fmt.Sprintf("%s: %d attempted, %d acknowledged, %d lost, %d duplicated, %d errors, longest outage %s",
		r.System, r.Attempted, r.Acked, r.Lost, r.Duplicated, r.Errors, r.Outage())
}

// Outage is LongestOutage as a person reads it: rounded to the millisecond,
// and "never ended (at least ...)" when OutageOpen.
func (r Report) Outage() string {
	if r.OutageOpen {
		return fmt.Sprintf("never ended (at least %s)", r.LongestOutage.Round(time.Millisecond))
	}
	return r.LongestOutage.Round(time.Millisecond).String()
}

// OK is nil when no acknowledged write was lost or duplicated.
func (r Report) OK() error {
	if r.Lost > 0 || r.Duplicated > 0 {
		return fmt.Errorf("%s", r)
	}
	if r.Acked == 0 {
		return fmt.Errorf("%s: no write was acknowledged, so nothing was shown", r)
	}
	return nil
}

// Outage is a time clients could not write: from the start of a write
// attempt that failed to the next acknowledged write.
type Outage struct{ Start, End time.Time }

// Tally counts a load's write attempts as they end, and the outages between
// them. It is not safe for concurrent use: a load calls it under its lock.
type Tally struct {
	// Attempted and Errors count the attempts, and those that failed.
	Attempted, Errors int
	// LastErr is the last failure.
	LastErr error
	// FailingSince is the start of the first failed attempt since the last
	// acknowledged one (zero when the last attempt succeeded).
	FailingSince time.Time
	// Outages are the outages that ended, in order.
	Outages []Outage
}

// Record counts an attempt that started at start and ended now with err
// (nil: acknowledged).
func (t *Tally) Record(start time.Time, err error) {
	t.Attempted++
	if err != nil {
		t.Errors++
		t.LastErr = err
		if t.FailingSince.IsZero() {
			t.FailingSince = start
		}
		return
	}
	if !t.FailingSince.IsZero() {
		t.Outages = append(t.Outages, Outage{Start: t.FailingSince, End: time.Now()})
		t.FailingSince = time.Time{}
	}
}

// LongestSince is the longest outage that ended after from (0 if none);
// LongestSince(time.Time{}) is the longest of the load.
func (t *Tally) LongestSince(from time.Time) time.Duration {
	var d time.Duration
	for _, o := range t.Outages {
		if o.End.After(from) {
			d = max(d, o.End.Sub(o.Start))
		}
	}
	return d
}

// Report is what the tally says, for a system with acked writes.
func (t *Tally) Report(system string, acked int) Report {
	return Report{System: system, Attempted: t.Attempted, Acked: acked, Errors: t.Errors, LongestOutage: t.LongestSince(time.Time{})}
}

// Children are the processes whose parent is pid, read from /proc.
func Children(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses,
		// so read after its last closing parenthesis.
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(data[bytes.LastIndexByte(data, ')')+1:]), &state, &ppid); err != nil || ppid != pid {
			continue
		}
		if child, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			out = append(out, child)
		}
	}
	return out
}

// FreePorts returns n distinct TCP ports the kernel says are free on every
// address (each taken on 0.0.0.0 while the next is chosen). A port two
// clusters could share (a fixed one, or one free on one address only) would
// let two test runs on one machine collide.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
