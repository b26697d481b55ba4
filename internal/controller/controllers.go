// Package controller builds and registers every vacate controller, in one
// list, on a controller-runtime manager.
package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/client-go/discovery"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vacate-dev/vacate/internal/controller/admission"
	"github.com/vacate-dev/vacate/internal/controller/coordinator"
	"github.com/vacate-dev/vacate/internal/controller/drainpolicy"
	"github.com/vacate-dev/vacate/internal/controller/evacuationprovider"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/nodedrain"
	"github.com/vacate-dev/vacate/internal/controller/scoped"
	servingctl "github.com/vacate-dev/vacate/internal/controller/serving"
	"github.com/vacate-dev/vacate/internal/controller/trigger"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/evictionrequest"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/leader"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// Options tune the controllers.
type Options struct {
	// EvictionWorkers bounds evictions in flight across all nodes.
	EvictionWorkers int
	// DrainWorkers is how many drains' passes run at once; zero uses
	// DefaultDrainWorkers.
	DrainWorkers int
	// EvictionsPerNode bounds evictions in flight per node.
	EvictionsPerNode int
	// EvictionQPS and EvictionBurst bound the rate of eviction calls.
	EvictionQPS   float64
	EvictionBurst int
	// APITimeout bounds each eviction call and each reconcile pass (and so
	// every API call a pass makes); watches are not bounded by it. Zero
	// uses eviction.DefaultCallTimeout.
	APITimeout time.Duration
	// AllowLoopbackHooks lets HTTP evacuation hooks call loopback
	// addresses: development only (the dev cluster's simulated pods live
	// on 127.0.0.0/8); otherwise a pod whose IP is loopback is never called.
	AllowLoopbackHooks bool
	// HookServiceAccount is the service account (NAMESPACE/NAME) whose
	// tokens prove who calls the HTTP evacuation hooks (pkg/hookauth): its
	// own, hook.DefaultCaller, when empty.
	HookServiceAccount string
	// Clock drives every controller; tests may pass one whose time they move.
	Clock Clock
	// WrapHookTransport, if set, wraps the HTTP hook client's transport (the
	// operator's leader fence: no hook call unless this replica leads).
	WrapHookTransport func(http.RoundTripper) http.RoundTripper
	// EvictionRequests is the mode of --eviction-requests
	// (EvictionRequestsAuto when empty): whether vacate coordinates the
	// EvictionRequest API and whether its drains request through it.
	EvictionRequests EvictionRequestsMode
	// Roles is the mode's decision at start (DecideRoles), made by the
	// caller, which also writes it on the leader's Lease.
	Roles EvictionRequestRoles
	// ServingPods is --serving-pods (ServingPodsLabelled when empty): which
	// pods outside drained nodes the serving controller watches.
	ServingPods string
	// Pods is the pod cache (NewPods), which the manager's client reads
	// pods from (PodClient) and the caller runs with the manager.
	Pods *Pods
	// Slices is the EndpointSlice cache (NewSlices), the same way.
	Slices *Slices
}

// EvictionRequestsMode says whether vacate coordinates Kubernetes'
// EvictionRequest API (lifecycle.k8s.io/v1alpha1).
type EvictionRequestsMode string

// The modes of --eviction-requests.
const (
	// EvictionRequestsAuto coordinates and requests where the API server
	// serves the API (discovery at start), and does neither elsewhere.
	EvictionRequestsAuto EvictionRequestsMode = "auto"
	// EvictionRequestsCoordinate coordinates and requests, and refuses to
	// start where the API is not served.
	EvictionRequestsCoordinate EvictionRequestsMode = "coordinate"
	// EvictionRequestsRequestOnly: vacate's drains request through the API,
	// another coordinator (upstream's) coordinates; refuses to start where
	// the API is not served.
	EvictionRequestsRequestOnly EvictionRequestsMode = "request-only"
	// EvictionRequestsOff neither coordinates nor requests: drains evict
	// every pod through the Eviction API, as where the API is not served.
	EvictionRequestsOff EvictionRequestsMode = "off"
)

// ParseEvictionRequestsMode reads --eviction-requests.
func ParseEvictionRequestsMode(s string) (EvictionRequestsMode, error) {
	switch m := EvictionRequestsMode(s); m {
	case EvictionRequestsAuto, EvictionRequestsCoordinate, EvictionRequestsRequestOnly, EvictionRequestsOff:
		return m, nil
	}
	return "", fmt.Errorf("--eviction-requests %q: want auto, coordinate, request-only or off", s)
}

// EvictionRequestRoles is what vacate does with the EvictionRequest API,
// decided once at start (DecideRoles).
type EvictionRequestRoles struct {
	// Coordinate: vacate coordinates every EvictionRequest (the
	// coordinator controller), and answers as its responder
	// vacate.dev/evacuation.
	Coordinate bool
	// Request: vacate's drains ask for the eviction of pods that declare
	// responders with EvictionRequests, and wait for their Evictions.
	Request bool
	// State says so on the leader's Lease (leader.LabelEvictionRequests).
	State string
}

// DefaultDrainWorkers is how many drains' passes run at once by default:
// a pass spends most of its time waiting for the API server (its status
// write), so drains of many nodes would queue behind each other with one.
const DefaultDrainWorkers = 10

// Clock is what the controllers need of a clock: tickers for the eviction
// queue, timers for waking drains when a maintenance window opens.
type Clock interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// controllerSetup registers one controller.
type controllerSetup interface {
	SetupWithManager(manager.Manager) error
}

// Setup registers every controller with the manager.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Pods == nil {
		return errors.New("no pod cache (controller.NewPods)")
	}
	opts.Pods.KeepWhile(keepScope(mgr.GetCache(), opts.Roles.Coordinate))
	nodePods := index.NodePods(func(ctx context.Context, node string) ([]*corev1.Pod, error) {
		return opts.Pods.List(ctx, scoped.Node(node))
	})
	cs, err := kubeClient(mgr)
	if err != nil {
		return err
	}
	// The eviction queue: every eviction call of every drain, its bounds
	// and its rate, run by the manager on the leader beside the
	// controllers.
	evictions := eviction.NewQueue(cs, eviction.Options{
		Workers: opts.EvictionWorkers, PerNode: opts.EvictionsPerNode,
		QPS: opts.EvictionQPS, Burst: opts.EvictionBurst, CallTimeout: opts.APITimeout, Clock: opts.Clock,
	})
	if err := mgr.Add(evictions); err != nil {
		return fmt.Errorf("adding the eviction queue: %w", err)
	}
	drains := nodedrain.NewReconciler(mgr.GetClient(), opts.Clock, mgr.GetEventRecorder("vacate-controller"), evictions)
	drains.APIReader, drains.Pods, drains.PodSource = mgr.GetAPIReader(), nodePods, opts.Pods
	if opts.Slices != nil {
		drains.SliceSource = opts.Slices
	}
	// Every outcome updates the drains' ledger and wakes the node's drain;
	// every attempt is checked against the pod's holds right before the
	// call.
	evictions.Handle(eviction.ForDrains, drains.OnOutcome, drains.MayEvict)
	if opts.WrapHookTransport != nil {
		drains.Hooks.Client.Transport = opts.WrapHookTransport(drains.Hooks.Client.Transport)
	}
	drains.AllowLoopbackHooks = opts.AllowLoopbackHooks
	caller, err := hook.ParseCaller(cmp.Or(opts.HookServiceAccount, hook.DefaultCaller))
	if err != nil {
		return err
	}
	drains.Hooks.Tokens = hook.NewTokenRequests(cs.CoreV1(), caller)
	drains.Hooks.Observe = metrics.HookCall
	drains.Workers = cmp.Or(opts.DrainWorkers, DefaultDrainWorkers)
	setups := []controllerSetup{
		&admission.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Pods: nodePods, Clock: opts.Clock, Events: mgr.GetEventRecorder("vacate-controller")},
		drains,
		&drainpolicy.Reconciler{Client: mgr.GetClient()},
		&evacuationprovider.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()},
		&trigger.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: opts.Clock, Events: mgr.GetEventRecorder("vacate-controller")},
		&servingctl.Reconciler{Client: mgr.GetClient(), Clock: opts.Clock, Pods: opts.Pods},
	}
	if opts.Roles.Coordinate || opts.Roles.Request {
		if err := index.RegisterEvictionRequests(ctx, mgr); err != nil {
			return err
		}
	}
	drains.Requests, drains.Responds = opts.Roles.Request, opts.Roles.Coordinate
	if opts.Roles.Coordinate {
		co := coordinator.NewReconciler(mgr.GetClient(), opts.Clock, mgr.GetEventRecorder("vacate-controller"), evictions)
		// Its hook calls are the drains': the same client (leader fence
		// included), tokens and loopback rule.
		co.Hooks.Client, co.Hooks.Tokens, co.Hooks.Observe, co.AllowLoopbackHooks = drains.Hooks.Client, drains.Hooks.Tokens, drains.Hooks.Observe, drains.AllowLoopbackHooks
		co.APIReader, co.Pods = mgr.GetAPIReader(), opts.Pods
		setups = append(setups, co)
	}
	mgr.GetLogger().Info("EvictionRequest API", "mode", cmp.Or(opts.EvictionRequests, EvictionRequestsAuto),
		"coordinating", opts.Roles.Coordinate, "requesting", opts.Roles.Request)
	for _, c := range setups {
		if err := c.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up controller %T: %w", c, err)
		}
	}
	return nil
}

// DecideRoles decides, at start, what vacate does with the EvictionRequest
// API: in auto, it coordinates and requests where discovery says the API
// server serves it (not by version number: it is an alpha behind a feature
// gate).
func DecideRoles(mode EvictionRequestsMode, d discovery.ServerResourcesInterface) (EvictionRequestRoles, error) {
	mode = cmp.Or(mode, EvictionRequestsAuto)
	if mode == EvictionRequestsOff {
		return EvictionRequestRoles{State: leader.EvictionRequestsOff}, nil
	}
	served, err := evictionrequest.Served(d)
	if err != nil {
		return EvictionRequestRoles{}, fmt.Errorf("--eviction-requests %s: %w", mode, err)
	}
	switch {
	case !served && mode != EvictionRequestsAuto:
		return EvictionRequestRoles{}, fmt.Errorf("--eviction-requests %s: the API server does not serve %s (enable the feature gate %s and that API), or use auto",
			mode, evictionrequest.GroupVersion, "EvictionRequestAPI")
	case !served:
		return EvictionRequestRoles{State: leader.EvictionRequestsNotServed}, nil
	case mode == EvictionRequestsRequestOnly:
		return EvictionRequestRoles{Request: true, State: leader.EvictionRequestsRequesting}, nil
	}
	return EvictionRequestRoles{Coordinate: true, Request: true, State: leader.EvictionRequestsCoordinating}, nil
}
