package rabbitmq

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/vacate-dev/vacate/internal/dev/testservers"
)

// LoadConfig describes a client load.
type LoadConfig struct {
	// URLs are the members' AMQP URLs (Cluster.URLs). Publisher k connects
	// to URLs[k%len] first; every client moves to the next URL when its
	// connection fails or is closed (a node going into maintenance closes
	// its clients' connections and takes no new ones).
	URLs []string
	// Queues are existing queues (quorum or classic) of the default virtual
	// host; the publishers write to them in turn, the consumer reads them
	// all.
	Queues []string
	// Publishers is the number of publishers; default len(URLs).
	Publishers int
	// Pause is each publisher's pause between two messages; default 10 ms.
	Pause time.Duration
}

// Load is a running client load: publishers that publish one message at a
// time and wait for the broker's confirm, and one consumer that acknowledges
// every delivery. Every message attempt has its own id, so a message the
// broker stored twice shows as a duplicate, never a retry. A delivery with
// the redelivered flag of an id already seen is a redelivery (at-least-once
// delivery after a connection loss, before the ack reached the broker), not
// a duplicate: duplicates are ids delivered again without that flag.
type Load struct {
	cfg    LoadConfig
	cancel context.CancelFunc
	pubs   sync.WaitGroup
	stopC  chan struct{}
	consWG sync.WaitGroup

	mu           sync.Mutex
	attempted    int
	acked        map[string]bool
	seen         map[string]int
	errors       int
	duplicated   int
	redeliveries int
	longest      time.Duration
	// failing is, per publisher still failing, when its failure started.
	failing map[int]time.Time
}

// StartLoad starts the publishers and the consumer.
func StartLoad(cfg LoadConfig) *Load {
	if cfg.Publishers == 0 {
		cfg.Publishers = len(cfg.URLs)
	}
	if cfg.Pause == 0 {
		cfg.Pause = 10 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cfg: cfg, cancel: cancel, stopC: make(chan struct{}), acked: map[string]bool{}, seen: map[string]int{}, failing: map[int]time.Time{}}
	for k := 0; k < cfg.Publishers; k++ {
		l.pubs.Add(1)
		go l.publish(ctx, k)
	}
	l.consWG.Add(1)
	go l.consume()
	return l
}

// Acked is the number of messages the broker confirmed so far.
func (l *Load) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// FailingSince is when the oldest outage still going on started: the
// earliest start of a failed attempt, over the publishers whose last
// attempt failed (zero if none). After Stop it is as the publishers left
// it: an outage that never ended (Stop's LongestOutage counts only outages
// that a confirm ended).
func (l *Load) FailingSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var since time.Time
	for _, at := range l.failing {
		if since.IsZero() || at.Before(since) {
			since = at
		}
	}
	return since
}

// Redeliveries is the number of deliveries flagged redelivered of messages
// already consumed.
func (l *Load) Redeliveries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.redeliveries
}

func dial(url string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second), Heartbeat: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func (l *Load) publish(ctx context.Context, k int) {
	defer l.pubs.Done()
	url := k % len(l.cfg.URLs)
	var (
		conn      *amqp.Connection
		ch        *amqp.Channel
		seq       int
		failStart time.Time
	)
	fail := func(start time.Time) {
		l.mu.Lock()
		l.errors++
		if failStart.IsZero() {
			failStart = start
			l.failing[k] = start
		}
		l.mu.Unlock()
		if conn != nil {
			conn.Close()
			conn, ch = nil, nil
		}
		url = (url + 1) % len(l.cfg.URLs)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for ctx.Err() == nil {
		start := time.Now()
		if conn == nil {
			var err error
			if conn, ch, err = dial(l.cfg.URLs[url]); err != nil {
				conn = nil
				fail(start)
				continue
			}
			if err := ch.Confirm(false); err != nil {
				fail(start)
				continue
			}
		}
		seq++
		id := fmt.Sprintf("p%d-%d", k, seq)
		queue := l.cfg.Queues[seq%len(l.cfg.Queues)]
		l.mu.Lock()
		l.attempted++
		l.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		dc, err := ch.PublishWithDeferredConfirmWithContext(wctx, "", queue, false, false,
			amqp.Publishing{MessageId: id, Body: []byte(id), DeliveryMode: amqp.Persistent})
		ok := false
		if err == nil {
			ok, err = dc.WaitContext(wctx)
		}
		cancel()
		if err != nil || !ok {
			if ctx.Err() != nil {
				return // stopped mid-publish: neither acknowledged nor failed
			}
			fail(start)
			continue
		}
		l.mu.Lock()
		l.acked[id] = true
		if !failStart.IsZero() {
			l.longest = max(l.longest, time.Since(failStart))
		}
		delete(l.failing, k)
		l.mu.Unlock()
		failStart = time.Time{}
		select {
		case <-ctx.Done():
		case <-time.After(l.cfg.Pause):
		}
	}
}

func (l *Load) consume() {
	defer l.consWG.Done()
	url := len(l.cfg.URLs) - 1
	for {
		select {
		case <-l.stopC:
			return
		default:
		}
		if !l.consumeFrom(l.cfg.URLs[url]) {
			return
		}
		url = (url + 1) % len(l.cfg.URLs)
		select {
		case <-l.stopC:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// consumeFrom consumes every queue through one connection until it fails
// (true) or the load stops (false).
func (l *Load) consumeFrom(url string) bool {
	conn, ch, err := dial(url)
	if err != nil {
		return true
	}
	defer conn.Close()
	if err := ch.Qos(100, 0, false); err != nil {
		return true
	}
	merged := make(chan amqp.Delivery)
	done := make(chan struct{})
	defer close(done)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	for _, q := range l.cfg.Queues {
		d, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return true
		}
		go func() {
			for m := range d {
				select {
				case merged <- m:
				case <-done:
					return
				}
			}
		}()
	}
	for {
		select {
		case <-l.stopC:
			return false
		case <-closed:
			return true
		case m := <-merged:
			l.mu.Lock()
			if l.seen[m.MessageId] > 0 {
				if m.Redelivered {
					l.redeliveries++
				} else {
					l.duplicated++
				}
			}
			l.seen[m.MessageId]++
			l.mu.Unlock()
			if err := m.Ack(false); err != nil {
				return true
			}
		}
	}
}

// Stop stops the publishers, then waits (until ctx ends) for the consumer
// to have received every confirmed message, stops it and reports. A
// confirmed message it never received counts as lost.
func (l *Load) Stop(ctx context.Context) testservers.Report {
	l.cancel()
	l.pubs.Wait()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !l.allSeen() {
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		}
		break
	}
	close(l.stopC)
	l.consWG.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := testservers.Report{
		System:        "RabbitMQ (messages confirmed by the broker)",
		Attempted:     l.attempted,
		Acked:         len(l.acked),
		Duplicated:    l.duplicated,
		LongestOutage: l.longest,
		Errors:        l.errors,
	}
	for id := range l.acked {
		if l.seen[id] == 0 {
			r.Lost++
		}
	}
	return r
}

func (l *Load) allSeen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.acked {
		if l.seen[id] == 0 {
			return false
		}
	}
	return true
}
