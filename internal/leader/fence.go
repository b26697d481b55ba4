// Package leader fences a vacate-controller replica that may have lost its
// Lease without knowing it yet.
//
// Leader election tells a replica it lost the Lease only when its elector
// next runs. A process that was frozen (SIGSTOP, a stalled VM, a long GC
// pause) past its lease resumes with every goroutine ready to finish what it
// was about to do: evictions, status patches, HTTP hook calls. Meanwhile a
// standby took the Lease and acts too. The Fence closes that window: the
// resource lock records when each of our renewals started, and every
// mutating API request and every hook call is refused unless the last one
// started within the validity (the renew deadline) by our own monotonic
// clock, which keeps counting while the process is frozen. A standby takes
// the Lease at the earliest a full lease duration after it saw our last
// renewal, so the lease duration minus the renew deadline is the margin for
// a request already on its way.
package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/vacate-dev/vacate/internal/version"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// ErrNotLeader refuses a request made while this replica cannot be sure it
// holds the Lease.
var ErrNotLeader = errors.New("refused: this replica does not hold a fresh leader lease")

// IsNotLeader reports whether err is (or wraps) ErrNotLeader.
func IsNotLeader(err error) bool { return errors.Is(err, ErrNotLeader) }

// Fence knows whether this replica renewed its Lease recently enough to act.
type Fence struct {
	clock    clock.PassiveClock
	validFor time.Duration

	mu      sync.Mutex
	renewed time.Time // start of the last successful acquire or renew; zero if none or released
}

// NewFence returns a fence that stays open for validFor after the start of
// each successful renewal.
func NewFence(clk clock.PassiveClock, validFor time.Duration) *Fence {
	return &Fence{clock: clk, validFor: validFor}
}

// Open reports whether this replica may act: its last renewal started less
// than the validity ago.
func (f *Fence) Open() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.renewed.IsZero() && f.clock.Since(f.renewed) < f.validFor
}

func (f *Fence) record(start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if start.After(f.renewed) {
		f.renewed = start
	}
}

func (f *Fence) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = time.Time{}
}

// Lock wraps the Lease's resource lock so that the fence learns of every
// successful acquisition and renewal by this replica, and closes when it
// releases the Lease.
func (f *Fence) Lock(inner resourcelock.Interface) resourcelock.Interface {
	return &fencedLock{Interface: inner, fence: f}
}

type fencedLock struct {
	resourcelock.Interface
	fence *Fence
}

// Create acquires a Lease that does not exist yet.
func (l *fencedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	start := l.fence.clock.Now()
	err := l.Interface.Create(ctx, ler)
	l.observe(start, ler, err)
	return err
}

// Update acquires, renews or (with an empty holder) releases the Lease.
func (l *fencedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	start := l.fence.clock.Now()
	if ler.HolderIdentity != l.Identity() {
		l.fence.close() // releasing: stop acting before the Lease is free
	}
	err := l.Interface.Update(ctx, ler)
	l.observe(start, ler, err)
	return err
}

func (l *fencedLock) observe(start time.Time, ler resourcelock.LeaderElectionRecord, err error) {
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.fence.record(start)
	}
}

// mutating reports whether an API request changes something.
func mutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// APITransport wraps the transport of the controllers' rest.Config: a
// request that changes something (anything but GET, HEAD, OPTIONS) is
// refused with ErrNotLeader while the fence is closed. Reads (caches,
// watches) go on.
func (f *Fence) APITransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if mutating(req.Method) && !f.Open() {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrNotLeader)
		}
		return rt.RoundTrip(req)
	})
}

// HookTransport wraps the HTTP hook client's transport: every call to an
// app is refused with ErrNotLeader while the fence is closed, and each call
// carries userAgent, so an app (and a test) can tell replicas apart.
func (f *Fence) HookTransport(userAgent string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if !f.Open() {
				return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), ErrNotLeader)
			}
			req = req.Clone(req.Context())
			req.Header.Set("User-Agent", userAgent)
			return rt.RoundTrip(req)
		})
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// NewLeaseLock is the Lease lock of leader election, for identity, with
// clients of its own built from cfg (which must not be fenced: the lock is
// how the fence opens). Each request is bounded by timeout, so that one hung
// renewal cannot use up the renew deadline.
func NewLeaseLock(cfg *rest.Config, namespace, name, identity string, timeout time.Duration, labels map[string]string) (resourcelock.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		Labels:     labels,
	}, nil
}

// Labels the leader writes on its Lease each time it takes or renews it, so
// that a client (the CLI) knows which build of vacate-controller holds it.
const (
	LabelName    = "app.kubernetes.io/name"
	LabelVersion = "app.kubernetes.io/version"
	// ControllerName is LabelName's value.
	ControllerName = "vacate-controller"
)

// LabelEvictionRequests says what the Lease's holder does with Kubernetes'
// EvictionRequest API: coordinates it (and its drains request through it:
// EvictionRequestsCoordinating), only requests (EvictionRequestsRequesting),
// or neither, and why (EvictionRequestsOff, EvictionRequestsNotServed).
const LabelEvictionRequests = "vacate.dev/eviction-requests"

// Values of LabelEvictionRequests.
const (
	EvictionRequestsCoordinating = "coordinating"
	EvictionRequestsRequesting   = "requesting"
	EvictionRequestsOff          = "off"
	EvictionRequestsNotServed    = "not-served"
)

// LeaseLabels are the labels of the Lease held by a controller of build b;
// evictionRequests is LabelEvictionRequests's value ("" leaves it out).
func LeaseLabels(b version.Info, evictionRequests string) map[string]string {
	l := map[string]string{LabelName: ControllerName, LabelVersion: version.LabelValue(b.Version)}
	if evictionRequests != "" {
		l[LabelEvictionRequests] = evictionRequests
	}
	return l
}
