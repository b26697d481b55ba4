//go:build stateful_bench

package stateful_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers"
	"github.com/vacate-dev/vacate/internal/dev/testservers/rabbitmq"
)

func init() {
	benchSystems = append(benchSystems, benchSystem{name: "rabbitmq-classic", recipe: "rabbitmq",
		mode: v1alpha1.ModeDecommission, start: startRabbitMQClassicBench})
}

const (
	// rabbitClassicStored holds rabbitClassicStoredN persistent messages,
	// each confirmed, that nobody consumes until the drain is over.
	rabbitClassicStored  = "stored"
	rabbitClassicStoredN = 200
	// rabbitClassicLive takes the publishers and the consumer of the load
	// all through the drain.
	rabbitClassicLive = "live"
	// rabbitClassicGoneFor is how long, after member 0 stopped, the other
	// members must have answered that the live queue's home is down before
	// the run stops watching: the outage has not ended by then.
	rabbitClassicGoneFor = 10 * time.Second
	// rabbitClassicProbeEvery is how often the probe asks the other
	// members whether the live queue is there.
	rabbitClassicProbeEvery = 250 * time.Millisecond
)

// rabbitClassicBench is RabbitMQ with two durable classic queues that live
// only on member 0 (declared through it, not mirrored), whose node is
// decommissioned: it never comes back. With kubectl drain, the pod's
// preStop hook is the RabbitMQ Cluster Operator's, which moves no classic
// queue: once the member stops, the other members answer 404 NOT_FOUND
// (home node down) for both queues. With vacate, the recipe's Decommission
// moves them, with their messages, to the other members before the pod is
// evicted.
//
// Lost counts confirmed messages by id: the stored ones that consuming
// everything left in the stored queue through each surviving member after
// the drain does not give back, and the live ones the consumer never
// received. At least once: an id the consumer receives again flagged
// redelivered is a redelivery (its ack was lost with a connection), not a
// duplicate; an id received again without that flag, or taken twice from
// the stored queue, is a duplicate.
//
// The longest outage is the longer of the publishers' (from a publish that
// failed to the next one confirmed) and the live queue's: a probe asks
// members 1 and 2 in turn every 250 ms whether it is there (a passive
// declare), and the queue is unusable from a probe that neither answered
// with it to the next one that did. RabbitMQ 3.10 confirms a message routed
// to a classic queue whose home node is down (and drops it), so the
// publishers alone would not see that outage.
type rabbitClassicBench struct {
	t      *testing.T
	rc     *rabbitmq.Cluster
	stored []string
	load   *rabbitmq.Load
	probe  *rabbitClassicProbe

	mu sync.Mutex
	// stopped is when each stopped member had stopped; ackedAtStop the
	// load's confirms by then.
	stopped     map[int]time.Time
	ackedAtStop int
}

func startRabbitMQClassicBench(t *testing.T, a *app) benchRun {
	rc, err := rabbitmq.Start(testenv.Context(t), rabbitmq.Config{IPs: a.IPs(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Stop() })
	r := &rabbitClassicBench{t: t, rc: rc, stopped: map[int]time.Time{}}
	for _, q := range []string{rabbitClassicStored, rabbitClassicLive} {
		if err := rc.DeclareClassicQueue(0, q); err != nil {
			t.Fatal(err)
		}
	}
	if r.stored, err = rc.Fill(0, rabbitClassicStored, rabbitClassicStored, rabbitClassicStoredN); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rabbitClassicBench) sidecarEnv(i int) []string { return r.rc.Env(i) }

// leader is member 0, the home of both classic queues.
func (r *rabbitClassicBench) leader(context.Context) (int, error) { return 0, nil }

func (r *rabbitClassicBench) startLoad(ctx context.Context) error {
	r.load = rabbitmq.StartLoad(rabbitmq.LoadConfig{URLs: r.rc.URLs(), Queues: []string{rabbitClassicLive}})
	r.probe = startRabbitClassicProbe(r.rc, rabbitClassicLive)
	r.t.Cleanup(r.probe.stop)
	return nil
}

// progress waits for 50 more confirms while the live queue is there. Once
// member 0 has stopped and the other members answer that the queue's home
// is down, it waits until they have said so for rabbitClassicGoneFor, and
// returns: the queue went with its node, and stopLoad reports an outage
// that never ended.
func (r *rabbitClassicBench) progress(ctx context.Context) error {
	target := r.load.Acked() + 50
	r.mu.Lock()
	stopped, ok := r.stopped[0]
	from := r.ackedAtStop
	r.mu.Unlock()
	return waitErr(ctx, func() bool {
		since, asked, said := r.probe.goneSince()
		if ok && asked.Before(stopped) {
			return false // the probe has not asked since
		}
		if !ok || since.IsZero() {
			return r.load.Acked() >= target
		}
		if time.Since(since) < rabbitClassicGoneFor {
			return false
		}
		r.t.Logf("the other members have answered for %s now that the live queue is not found, lately: %v; since member 0 stopped, the broker confirmed %d more publishes to it",
			time.Since(since).Round(time.Second), said, r.load.Acked()-from)
		return true
	})
}

func (r *rabbitClassicBench) preStop(ctx context.Context, i int) error {
	return rabbitmqOperatorPreStop(ctx, r.rc, i)
}

func (r *rabbitClassicBench) stopMember(i int) {
	_ = r.rc.StopMember(i)
	acked := r.load.Acked()
	r.mu.Lock()
	r.stopped[i] = time.Now()
	r.ackedAtStop = acked
	r.mu.Unlock()
}

func (r *rabbitClassicBench) isStopped(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.stopped[i]
	return ok
}

// stopLoad stops the probe and the load (its consumer gets 20 s to receive
// every confirmed live message), then consumes what is left of the stored
// queue through each member still running, and judges both by message id.
func (r *rabbitClassicBench) stopLoad(ctx context.Context) (testservers.Report, error) {
	end := time.Now()
	r.probe.stop()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	rep := r.load.Stop(sctx)
	live := rep
	if since := r.load.FailingSince(); !since.IsZero() {
		rep.OutageOpen = true
		rep.LongestOutage = max(rep.LongestOutage, end.Sub(since))
	}
	unusable, open := r.probe.longest(end)
	rep.OutageOpen = rep.OutageOpen || open
	rep.LongestOutage = max(rep.LongestOutage, unusable)
	taken := map[string]int{}
	var refused []string
	for i := range r.rc.Size() {
		if r.isStopped(i) {
			continue
		}
		ids, err := r.rc.Take(i, rabbitClassicStored)
		for _, id := range ids {
			taken[id]++
		}
		if err != nil {
			refused = append(refused, err.Error())
		}
	}
	lost, duplicated := 0, 0
	for _, id := range r.stored {
		switch n := taken[id]; {
		case n == 0:
			lost++
		case n > 1:
			duplicated += n - 1
		}
	}
	rep.System = "RabbitMQ classic queues (messages confirmed by the broker)"
	rep.Attempted += len(r.stored)
	rep.Acked += len(r.stored)
	rep.Lost += lost
	rep.Duplicated += duplicated
	r.t.Logf("%s: %d of %d messages consumed after the drain through the members still running (%d lost, %d duplicated)%s",
		rabbitClassicStored, len(r.stored)-lost, len(r.stored), lost, duplicated, refusedSuffix(refused))
	r.t.Logf("%s: %d confirmed, %d lost, %d duplicated, %d redeliveries, %d failed publishes, publishers' longest outage %s; "+
		"the queue unusable for at most %s%s (probe)",
		rabbitClassicLive, live.Acked, live.Lost, live.Duplicated, r.load.Redeliveries(), live.Errors, live.Outage(),
		unusable.Round(time.Millisecond), map[bool]string{true: ", not ended at the stop"}[open])
	return rep, nil
}

func refusedSuffix(refused []string) string {
	if len(refused) == 0 {
		return ""
	}
	return "; the members answered: " + strings.Join(refused, "; ")
}

// rabbitClassicProbe asks members 1 to n-1 (never member 0, the drained
// one), in turn, whether a queue is there, every rabbitClassicProbeEvery.
type rabbitClassicProbe struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	tally testservers.Tally
	// gone is when every member asked started answering 404 NOT_FOUND
	// (zero while one does not), and said the last of those answers; asked
	// is when the last round of questions started.
	gone, asked time.Time
	said        error
}

func startRabbitClassicProbe(rc *rabbitmq.Cluster, queue string) *rabbitClassicProbe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &rabbitClassicProbe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(rabbitClassicProbeEvery)
		defer tick.Stop()
		for {
			p.ask(rc, queue)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *rabbitClassicProbe) ask(rc *rabbitmq.Cluster, queue string) {
	start := time.Now()
	var errs []error
	notFound := true
	for i := 1; i < rc.Size(); i++ {
		err := rc.CheckQueue(i, queue)
		if err == nil {
			errs = nil
			break
		}
		if ae := (*amqp.Error)(nil); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
			notFound = false
		}
		errs = append(errs, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = start
	if errs == nil {
		p.tally.Record(start, nil)
		p.gone = time.Time{}
		return
	}
	p.tally.Record(start, errors.Join(errs...))
	switch {
	case !notFound:
		p.gone = time.Time{}
	case p.gone.IsZero():
		p.gone = start
		fallthrough
	default:
		p.said = errs[0]
	}
}

func (p *rabbitClassicProbe) stop() {
	p.cancel()
	<-p.done
}

// goneSince is when every member asked started answering that the queue is
// not found (zero if one does not now), when the last round of questions
// started, and the last of those answers.
func (p *rabbitClassicProbe) goneSince() (since, asked time.Time, said error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone, p.asked, p.said
}

// longest is the longest time the queue was unusable, counting one that
// had not ended by end up to end (open).
func (p *rabbitClassicProbe) longest(end time.Time) (d time.Duration, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d = p.tally.LongestSince(time.Time{})
	if !p.tally.FailingSince.IsZero() {
		d, open = max(d, end.Sub(p.tally.FailingSince)), true
	}
	return d, open
}
