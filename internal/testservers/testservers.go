// Package testservers runs real stateful servers (RabbitMQ, PostgreSQL under
// Patroni, Redis with Sentinel) as local processes, one per simulated pod on
// that pod's loopback IP, for the tests and benchmarks that prove the recipes
// of examples/ (docs/recipes). Each system has its own package below this
// one; this package holds what they share: what a client load saw.
package testservers

import (
	"fmt"
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
	// Errors counts write attempts that failed (and were retried).
	Errors int
}

func (r Report) String() string {
	return fmt.Sprintf("%s: %d attempted, %d acknowledged, %d lost, %d duplicated, %d errors, longest outage %s",
		r.System, r.Attempted, r.Acked, r.Lost, r.Duplicated, r.Errors, r.LongestOutage.Round(time.Millisecond))
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
