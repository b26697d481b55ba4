// Package operator builds vacate-controller: a controller-runtime manager
// with leader election on a Lease, metrics, health probes and every
// controller registered.
package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/vacate-dev/vacate/internal/controller"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/leader"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/metrics/state"
	"github.com/vacate-dev/vacate/internal/version"
	"github.com/vacate-dev/vacate/internal/webhook"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// Options configure the operator.
type Options struct {
	MetricsAddr string // "0" disables the metrics server
	// MetricsSecure serves /metrics over HTTPS (a self-signed certificate)
	// to clients that authenticate with a Kubernetes token and may get the
	// non-resource URL /metrics: TokenReview and SubjectAccessReview.
	MetricsSecure bool
	ProbeAddr     string // "0" disables the probes
	// PprofAddr serves net/http/pprof (heap, CPU, goroutine profiles); ""
	// or "0" disables it, the default.
	PprofAddr string
	// APICompression asks the API server for gzip-compressed responses
	// and watch streams. Off by default: the controller runs next to the
	// API server, and decompressing every watch event was a fifth of an
	// idle controller's CPU at 1,000 nodes (docs/performance.md).
	APICompression bool

	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	// Identity names this replica in the Lease, in its API requests' user
	// agent and in its HTTP hook calls. Default: the host name and a random
	// suffix.
	Identity string

	Controllers controller.Options

	// Webhook is the server of the admission webhooks (endpoint-aware,
	// eviction responder, NodeDrain policy): disabled unless its address
	// is set.
	Webhook webhook.Options

	// SeveralInProcess allows more than one manager in the process (tests):
	// controller-runtime otherwise refuses a second controller of a name.
	SeveralInProcess bool
}

// DefaultWebhookCertDir is where the webhook's certificate Secret is
// mounted (controller-runtime's default directory).
const DefaultWebhookCertDir = "/tmp/k8s-webhook-server/serving-certs"

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		MetricsAddr:             ":8080",
		ProbeAddr:               ":8081",
		LeaderElect:             true,
		LeaderElectionID:        leader.DefaultLeaseName,
		LeaderElectionNamespace: leader.DefaultLeaseNamespace,
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		Webhook: webhook.Options{CertDir: DefaultWebhookCertDir, Rotate: true, Namespace: leader.DefaultLeaseNamespace,
			ResponderPriority: webhook.DefaultResponderPriority},
	}
}

// Scheme holds the kinds vacate reads and writes: Kubernetes' own and
// vacate's (the same scheme providers get from pkg/evacuation).
func Scheme() (*runtime.Scheme, error) { return evacuation.Scheme() }

// New builds the manager with every controller registered.
func New(ctx context.Context, cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	if err := opts.ValidateLeaderElection(); err != nil {
		return nil, err
	}
	metrics.Register()
	identity, err := identityOf(opts)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "vacate-controller/" + identity
	cfg.DisableCompression = !opts.APICompression
	// The metrics' token and access reviews are creates that every replica
	// makes, the standby too: not through the fence.
	reviewCfg := rest.CopyConfig(cfg)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a discovery client: %w", err)
	}
	roles, err := controller.DecideRoles(opts.Controllers.EvictionRequests, dc)
	if err != nil {
		return nil, err
	}
	opts.Controllers.Roles = roles
	// The eviction-responder webhook declares vacate's responder only
	// where vacate answers it.
	opts.Webhook.Coordinating = roles.Coordinate
	lock, err := fence(cfg, identity, roles.State, &opts)
	if err != nil {
		return nil, err
	}
	leaseDuration, renewDeadline, retryPeriod := opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod
	var webhookServer crwebhook.Server
	if opts.Webhook.Enabled() {
		if webhookServer, err = opts.Webhook.Server(); err != nil {
			return nil, err
		}
	}
	newClient, err := scopedCaches(cfg, &opts.Controllers)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewClient:                           newClient,
		WebhookServer:                       webhookServer,
		Scheme:                              scheme,
		Metrics:                             metricsOptions(opts, reviewCfg),
		HealthProbeBindAddress:              opts.ProbeAddr,
		PprofBindAddress:                    opts.PprofAddr,
		LeaderElection:                      opts.LeaderElect,
		LeaderElectionID:                    opts.LeaderElectionID,
		LeaderElectionNamespace:             opts.LeaderElectionNamespace,
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       true,
		LeaseDuration:                       &leaseDuration,
		RenewDeadline:                       &renewDeadline,
		RetryPeriod:                         &retryPeriod,
		Cache:                               cache.Options{DefaultTransform: slimObjects},
		Controller: config.Controller{SkipNameValidation: ptr.To(opts.SeveralInProcess),
			ReconciliationTimeout: reconcileTimeout(opts.Controllers.APITimeout)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	for _, c := range []manager.Runnable{opts.Controllers.Pods, opts.Controllers.Slices} {
		if err := mgr.Add(c); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := controller.Setup(ctx, mgr, opts.Controllers); err != nil {
		return nil, err
	}
	if opts.Webhook.Enabled() {
		if err := webhook.Register(mgr, opts.Webhook); err != nil {
			return nil, err
		}
	}
	if opts.MetricsAddr != "0" {
		c := state.New(mgr.GetCache(), mgr.Elected(), mgr.GetLogger().WithName("state-metrics"))
		if err := mgr.Add(stateMetrics{collector: c}); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// stateMetrics serves the state metrics (internal/metrics/state) while the
// manager runs, on every replica: the leader reports vacate's objects, a
// standby that it waits. It registers the collector with
// controller-runtime's registry when the manager starts and takes it out
// when it stops, so that a manager started later in the same process (a
// test's) can serve its own.
type stateMetrics struct{ collector *state.Collector }

// Start registers the collector until ctx ends.
func (s stateMetrics) Start(ctx context.Context) error {
	if err := crmetrics.Registry.Register(s.collector); err != nil {
		return fmt.Errorf("registering the state metrics (does another manager of this process serve metrics?): %w", err)
	}
	<-ctx.Done()
	crmetrics.Registry.Unregister(s.collector)
	return nil
}

// NeedLeaderElection is false: a standby says that it waits.
func (stateMetrics) NeedLeaderElection() bool { return false }

// reconcileTimeout bounds each reconcile pass, and so every API call it
// makes: a pass that a slow API server or etcd holds up ends with an error
// and is retried with backoff, rather than parking a worker. Watches are
// not bounded (rest.Config.Timeout would cut them).
func reconcileTimeout(apiTimeout time.Duration) time.Duration {
	if apiTimeout <= 0 {
		return eviction.DefaultCallTimeout
	}
	return apiTimeout
}

// jitterFactor is client-go's leader election jitter: candidates retry
// within RetryPeriod * jitterFactor, and the renew deadline must leave room
// for that.
const jitterFactor = 1.2

// ValidateLeaderElection checks the lease settings, naming the flags: the
// renew deadline must be shorter than the lease duration (a leader gives up
// and stops acting before a standby may take the Lease; the difference is
// the margin for requests already on their way), and longer than the retry
// period with its jitter (a leader gets more than one try to renew).
func (o Options) ValidateLeaderElection() error {
	if !o.LeaderElect {
		return nil
	}
	switch {
	case o.LeaderElectionID == "" || o.LeaderElectionNamespace == "":
		return errors.New("--leader-election-id and --leader-election-namespace must not be empty")
	case o.LeaseDuration <= 0 || o.RenewDeadline <= 0 || o.RetryPeriod <= 0:
		return fmt.Errorf("--leader-election-lease-duration (%s), --leader-election-renew-deadline (%s) and --leader-election-retry-period (%s) must be positive",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	case o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("--leader-election-renew-deadline (%s) must be shorter than --leader-election-lease-duration (%s): the leader must stop acting before a standby may take the Lease",
			o.RenewDeadline, o.LeaseDuration)
	case float64(o.RenewDeadline) <= jitterFactor*float64(o.RetryPeriod):
		return fmt.Errorf("--leader-election-renew-deadline (%s) must be longer than %.1f times --leader-election-retry-period (%s): the leader must get more than one try to renew",
			o.RenewDeadline, jitterFactor, o.RetryPeriod)
	}
	return nil
}

// metricsOptions serve /metrics in plain HTTP, or with --metrics-secure
// over HTTPS behind controller-runtime's authentication and authorisation
// filter (reviews made with reviewCfg).
func metricsOptions(opts Options, reviewCfg *rest.Config) metricsserver.Options {
	o := metricsserver.Options{BindAddress: opts.MetricsAddr}
	if opts.MetricsSecure {
		o.SecureServing = true
		o.FilterProvider = func(_ *rest.Config, _ *http.Client) (metricsserver.Filter, error) {
			hc, err := rest.HTTPClientFor(reviewCfg)
			if err != nil {
				return nil, err
			}
			return filters.WithAuthenticationAndAuthorization(reviewCfg, hc)
		}
	}
	return o
}

// fence sets up leader election's Lease lock and the fence that goes with
// it (see internal/leader): the lock has its own rest.Config, so renewals
// never queue behind the controllers' requests and are never fenced; cfg's
// requests that change something, and opts' HTTP hook calls, go through
// only while the last renewal is fresher than the renew deadline. Without
// leader election there is neither lock nor fence.
func fence(cfg *rest.Config, identity, evictionRequests string, opts *Options) (resourcelock.Interface, error) {
	if !opts.LeaderElect {
		return nil, nil
	}
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.UserAgent += "/leader-election"
	// One hung request must not use up the renew deadline.
	lock, err := leader.NewLeaseLock(leaseCfg, opts.LeaderElectionNamespace, opts.LeaderElectionID, identity,
		max(opts.RenewDeadline/2, time.Second), leader.LeaseLabels(version.Get(), evictionRequests))
	if err != nil {
		return nil, err
	}
	f := leader.NewFence(clock.RealClock{}, opts.RenewDeadline)
	cfg.Wrap(f.APITransport)
	opts.Controllers.WrapHookTransport = f.HookTransport(cfg.UserAgent)
	return f.Lock(lock), nil
}

// identityOf is the replica's identity: the option, else the host name and
// a random suffix, as controller-runtime would choose.
func identityOf(opts Options) (string, error) {
	if opts.Identity != "" {
		return opts.Identity, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("choosing an identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// InProcessOptions run a controller inside another program (the demo,
// tests, `vacate dev controller`): no listeners, no leader election.
func InProcessOptions() Options {
	opts := DefaultOptions()
	opts.MetricsAddr, opts.ProbeAddr, opts.LeaderElect, opts.SeveralInProcess = "0", "0", false, true
	return opts
}

// Start runs the operator in the background until stop is called, which
// cancels it and returns its error.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (stop func() error, err error) {
	mctx, cancel := context.WithCancel(ctx)
	mgr, err := New(mctx, cfg, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	return func() error {
		cancel()
		return <-done
	}, nil
}

// scopedCaches makes the pod and EndpointSlice caches, scoped to the work,
// never all of the cluster's (opts.Pods, opts.Slices; the caller runs
// them with the manager), and the manager's client that reads them.
func scopedCaches(cfg *rest.Config, opts *controller.Options) (client.NewClientFunc, error) {
	pods, err := controller.NewPods(cfg, slimObjects, opts.ServingPods)
	if err != nil {
		return nil, err
	}
	slices, err := controller.NewSlices(cfg, slimObjects)
	if err != nil {
		return nil, err
	}
	opts.Pods, opts.Slices = pods, slices
	return scopedClient(pods, slices), nil
}

// scopedClient makes the manager's client: controller-runtime's, reading
// pods and EndpointSlices from the scoped caches instead
// (controller.PodClient), and from the API server a pod no scope holds.
func scopedClient(pods *controller.Pods, slices *controller.Slices) client.NewClientFunc {
	return func(cfg *rest.Config, o client.Options) (client.Client, error) {
		c, err := client.New(cfg, o)
		if err != nil {
			return nil, err
		}
		live, err := client.New(cfg, client.Options{HTTPClient: o.HTTPClient, Scheme: o.Scheme, Mapper: o.Mapper})
		if err != nil {
			return nil, err
		}
		return controller.PodClient{Client: c, Pods: pods, Slices: slices, Live: live}, nil
	}
}
