package traffic

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// BalancerOptions configure a Balancer.
type BalancerOptions struct {
	// Rate is how many requests a second are sent. Default 200.
	Rate float64
	// Lag is how long after the Balancer sees an EndpointSlice change it
	// starts to route by it, as kube-proxy applies changes at its next
	// sync: the window in which a pod that stopped listening still gets
	// requests. Default 1s; a negative Lag applies changes at once.
	Lag time.Duration
	// Port requests go to. Default: the EndpointSlice's first port.
	Port int
	// Timeout of one request, after which it counts as failed. Default 5s:
	// what is measured is requests sent to a server that stopped (refused
	// at once); a machine whose CPUs a test suite saturates answers slowly,
	// which is not a dropped request.
	Timeout time.Duration
}

// Stats count the requests a Balancer sent. A request counts once it has
// an outcome, so Sent = OK + Failed + NoBackend in every snapshot and in
// every window between two.
type Stats struct {
	// Sent is every request the Balancer tried to send, in flight excepted.
	Sent int
	// OK is the requests answered 200.
	OK int
	// Failed is the requests sent to an endpoint that refused, reset or
	// timed out, or answered something other than 200.
	Failed int
	// NoBackend is the requests that found no ready endpoint: as lost to a
	// user as a failed one, but a matter of capacity, not of ordering.
	NoBackend int
	// Errors are the first few failures, with the time since the start.
	Errors []string
}

// Lost is every request a user would have seen fail.
func (s Stats) Lost() int { return s.Failed + s.NoBackend }

// Since is what happened between earlier, a snapshot of the same Balancer,
// and s, so a test can check a window (steady state, one drain) alone. Its
// Errors are those recorded after earlier, as far as the first few go.
func (s Stats) Since(earlier Stats) Stats {
	d := Stats{Sent: s.Sent - earlier.Sent, OK: s.OK - earlier.OK, Failed: s.Failed - earlier.Failed,
		NoBackend: s.NoBackend - earlier.NoBackend}
	if len(s.Errors) > len(earlier.Errors) {
		d.Errors = append(d.Errors, s.Errors[len(earlier.Errors):]...)
	}
	return d
}

// String reads as "sent 600: 598 ok, 2 failed, 0 with no backend".
func (s Stats) String() string {
	return fmt.Sprintf("sent %d: %d ok, %d failed, %d with no backend", s.Sent, s.OK, s.Failed, s.NoBackend)
}

// Balancer stands in for kube-proxy and a client: it sends requests at a
// steady rate to a Service's ready endpoints, round robin, by a view of its
// EndpointSlices that lags behind them, and counts what failed.
type Balancer struct {
	n       *Network
	opts    BalancerOptions
	started time.Time
	client  *http.Client
	factory informers.SharedInformerFactory
	lister  cache.Indexer
	cancel  context.CancelFunc
	changed chan struct{}
	wg      sync.WaitGroup // the loops and the requests in flight

	mu       sync.Mutex
	backends []netip.AddrPort // the view requests are routed by
	next     int
	pending  []viewChange // changes seen, not applied yet
	outside  map[netip.Addr]bool
	stats    Stats
}

// viewChange is the set of ready endpoints as seen at some moment, to be
// applied at due.
type viewChange struct {
	due      time.Time
	backends []netip.AddrPort
}

// StartBalancer starts sending requests to the ready endpoints of service
// in namespace, once it has listed its EndpointSlices (or ctx ended). Only
// endpoints inside n are sent to; any other is reported in the Errors.
// Stop it with Stop.
func StartBalancer(ctx context.Context, cs kubernetes.Interface, n *Network, namespace, service string, opts BalancerOptions) *Balancer {
	if opts.Rate <= 0 {
		opts.Rate = 200
	}
	if opts.Lag == 0 {
		opts.Lag = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	b := &Balancer{n: n, opts: opts, started: time.Now(), cancel: cancel, changed: make(chan struct{}, 1), outside: map[netip.Addr]bool{}}
	b.client = &http.Client{
		Timeout: opts.Timeout,
		Transport: &http.Transport{
			Proxy: nil, // never through a proxy the environment names
			// A connection per request, as kube-proxy balances connections:
			// a kept-alive one would hide a closed listener.
			DisableKeepAlives: true,
			DialContext:       b.dial,
		},
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service}).String()
	b.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	inf := b.factory.Discovery().V1().EndpointSlices().Informer()
	b.lister = inf.GetIndexer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.observe() },
		UpdateFunc: func(_, _ any) { b.observe() },
		DeleteFunc: func(any) { b.observe() },
	})
	b.factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	// The view starts from what is there now: there is nothing to lag behind.
	b.mu.Lock()
	b.pending = nil
	b.backends = b.readyEndpoints()
	b.mu.Unlock()
	b.wg.Add(2)
	go b.applyLoop(ctx)
	go b.sendLoop(ctx)
	return b
}

// Stats returns the counts so far.
func (b *Balancer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Errors = slices.Clone(s.Errors)
	return s
}

// Backends is the Balancer's current view: where requests go now.
func (b *Balancer) Backends() []netip.AddrPort {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.backends)
}

// Stop stops sending, waits for the requests in flight and returns the
// final counts.
func (b *Balancer) Stop() Stats {
	b.cancel()
	b.factory.Shutdown()
	b.wg.Wait()
	return b.Stats()
}

// observe queues the ready endpoints as they are now, to apply Lag later.
func (b *Balancer) observe() {
	b.mu.Lock()
	b.pending = append(b.pending, viewChange{due: time.Now().Add(max(b.opts.Lag, 0)), backends: b.readyEndpoints()})
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// readyEndpoints lists the ready endpoints of the Service's slices in the
// informer's cache. Called with b.mu held.
func (b *Balancer) readyEndpoints() []netip.AddrPort {
	var eps []netip.AddrPort
	for _, obj := range b.lister.List() {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		port := b.opts.Port
		for _, p := range s.Ports {
			if port == 0 && p.Port != nil {
				port = int(*p.Port)
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			// kube-proxy reads an unknown readiness as ready.
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				if !b.n.Contains(ip) {
					if !b.outside[ip] {
						b.outside[ip] = true
						b.recordErrorLocked(fmt.Sprintf("endpoint %s is outside network %s (%s): not sent to", ip, b.n.Name(), b.n.Prefix()))
					}
					continue
				}
				eps = append(eps, netip.AddrPortFrom(ip, uint16(port)))
			}
		}
	}
	slices.SortFunc(eps, func(x, y netip.AddrPort) int { return x.Compare(y) })
	return slices.Compact(eps)
}

// applyLoop applies each queued view when it is due, in the order seen.
func (b *Balancer) applyLoop(ctx context.Context) {
	defer b.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		now := time.Now()
		for len(b.pending) > 0 && !b.pending[0].due.After(now) {
			b.backends = b.pending[0].backends
			b.pending = b.pending[1:]
		}
		wait := time.Hour
		if len(b.pending) > 0 {
			wait = b.pending[0].due.Sub(now)
		}
		b.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-b.changed:
		case <-timer.C:
		}
	}
}

// sendLoop starts requests at Rate, each on its own, so a request that
// hangs until its timeout does not slow the rate down. It counts from the
// start rather than per tick, because a busy machine delays and drops
// ticks: the rate is the one asked for, in bursts if it must.
func (b *Balancer) sendLoop(ctx context.Context) {
	defer b.wg.Done()
	tick := time.NewTicker(time.Duration(float64(time.Second) / b.opts.Rate))
	defer tick.Stop()
	start, sent := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for due := int(time.Since(start).Seconds() * b.opts.Rate); sent < due; sent++ {
			b.dispatch()
		}
	}
}

// dispatch picks the next backend by the current view and sends to it.
func (b *Balancer) dispatch() {
	b.mu.Lock()
	if len(b.backends) == 0 {
		b.stats.Sent++
		b.stats.NoBackend++
		b.recordErrorLocked("no ready endpoint")
		b.mu.Unlock()
		return
	}
	to := b.backends[b.next%len(b.backends)]
	b.next++
	b.mu.Unlock()
	b.wg.Add(1)
	go b.send(to)
}

// send makes one request; it does not follow the Balancer's context, so
// that Stop lets requests in flight finish and count.
func (b *Balancer) send(to netip.AddrPort) {
	defer b.wg.Done()
	err := b.get(to)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats.Sent++
	if err != nil {
		b.stats.Failed++
		b.recordErrorLocked(fmt.Sprintf("%s: %v", to, err))
		return
	}
	b.stats.OK++
}

func (b *Balancer) get(to netip.AddrPort) error {
	resp, err := b.client.Get("http://" + to.String() + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// dial connects only to pod addresses of the Network: whatever the
// EndpointSlices say, the Balancer sends nothing anywhere else.
func (b *Balancer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !b.n.Contains(ap.Addr()) {
		return nil, fmt.Errorf("refusing to dial %s: not a pod address of network %s", addr, b.n.Name())
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// recordErrorLocked keeps the first few errors. Called with b.mu held.
func (b *Balancer) recordErrorLocked(msg string) {
	if len(b.stats.Errors) < maxErrors {
		b.stats.Errors = append(b.stats.Errors, fmt.Sprintf("+%.3fs %s", time.Since(b.started).Seconds(), msg))
	}
}
