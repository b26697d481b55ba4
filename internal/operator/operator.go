// Package operator builds vacate-controller: a controller-runtime manager
// with leader election on a Lease, metrics, health probes and every
// controller registered.
package operator

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vacate-dev/vacate/internal/controller"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// Options configure the operator.
type Options struct {
	MetricsAddr string // "0" disables the metrics server
	ProbeAddr   string // "0" disables the probes

	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration

	Controllers controller.Options

	// SeveralInProcess allows more than one manager in the process (tests):
	// controller-runtime otherwise refuses a second controller of a name.
	SeveralInProcess bool
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{
		MetricsAddr:             ":8080",
		ProbeAddr:               ":8081",
		LeaderElect:             true,
		LeaderElectionID:        "vacate-controller",
		LeaderElectionNamespace: "kube-system",
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
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
	metrics.Register()
	leaseDuration, renewDeadline, retryPeriod := opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.ProbeAddr,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        opts.LeaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Its own rest.Config, so lease renewals never queue behind the
		// controllers' requests under client-side throttling.
		LeaderElectionConfig:          rest.CopyConfig(cfg),
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		Cache:                         cache.Options{DefaultTransform: slimObjects},
		Controller: config.Controller{SkipNameValidation: ptr.To(opts.SeveralInProcess),
			ReconciliationTimeout: reconcileTimeout(opts.Controllers.APITimeout)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
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
	return mgr, nil
}

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

// slimObjects drops what vacate never reads from cached objects: managed
// fields everywhere, and container statuses of pods.
func slimObjects(obj any) (any, error) {
	obj, err := cache.TransformStripManagedFields()(obj)
	if err != nil {
		return obj, err
	}
	if p, ok := obj.(*corev1.Pod); ok {
		p.Status.ContainerStatuses = nil
		p.Status.InitContainerStatuses = nil
		p.Status.EphemeralContainerStatuses = nil
	}
	return obj, nil
}

var _ toolscache.TransformFunc = slimObjects

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
