// Command vacate-controller is the vacate operator: the NodeDrain controller
// with leader election, metrics and health probes.
package main

import (
	"flag"
	"fmt"
	"os"

	// Maintenance windows name time zones; embedded, they load in a minimal
	// container image that has no /usr/share/zoneinfo.
	_ "time/tzdata"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vacate-dev/vacate/internal/controller"
	"github.com/vacate-dev/vacate/internal/eviction"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/internal/version"
	"github.com/vacate-dev/vacate/internal/webhook"
)

func main() {
	operator.TuneGC()
	opts := operator.DefaultOptions()
	// --kubeconfig is registered by controller-runtime and read by ctrl.GetConfig.
	fs := flag.CommandLine
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", opts.MetricsAddr, "address of the /metrics endpoint; 0 disables it")
	fs.BoolVar(&opts.MetricsSecure, "metrics-secure", false, "serve /metrics over HTTPS (a self-signed certificate) only to clients with a Kubernetes token allowed to get the non-resource URL /metrics (the controller then needs create on tokenreviews and subjectaccessreviews)")
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", opts.ProbeAddr, "address of /healthz and /readyz; 0 disables them")
	fs.StringVar(&opts.PprofAddr, "pprof-bind-address", "", "address of net/http/pprof's profiles (heap, CPU, goroutines); empty or 0 disables them (the default): profiles show the cluster's data, so bind to localhost")
	fs.BoolVar(&opts.LeaderElect, "leader-elect", opts.LeaderElect, "elect a leader on a Lease so only one replica acts")
	fs.StringVar(&opts.LeaderElectionID, "leader-election-id", opts.LeaderElectionID, "name of the Lease")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", opts.LeaderElectionNamespace, "namespace of the Lease")
	fs.DurationVar(&opts.LeaseDuration, "leader-election-lease-duration", opts.LeaseDuration, "how long a Lease holds without renewal")
	fs.DurationVar(&opts.RenewDeadline, "leader-election-renew-deadline", opts.RenewDeadline, "how long the leader tries to renew before giving up")
	fs.DurationVar(&opts.RetryPeriod, "leader-election-retry-period", opts.RetryPeriod, "how often candidates try to acquire the Lease")
	fs.StringVar(&opts.Identity, "identity", "", "name of this replica in the Lease, in its requests' user agent and its HTTP hook calls (default: host name and a random suffix)")
	fs.StringVar(&opts.Webhook.Addr, "webhook-bind-address", "", "address of the admission webhooks (endpoint-aware: the readiness gate vacate.dev/serving on opted-in pods; eviction responder: vacate.dev/evacuation in opted-in pods' spec.evictionResponders; the NodeDrain policy check), such as :9443; empty disables them")
	fs.StringVar(&opts.Webhook.CertDir, "webhook-cert-dir", opts.Webhook.CertDir, "directory of the webhook's serving certificate, tls.crt and tls.key")
	fs.BoolVar(&opts.Webhook.Rotate, "webhook-cert-rotation", opts.Webhook.Rotate, "generate and rotate the webhook's certificate in Secret vacate-webhook-cert (mounted at --webhook-cert-dir) and inject its CA into the MutatingWebhookConfiguration vacate-endpoint-aware")
	fs.StringVar(&opts.Webhook.Namespace, "webhook-namespace", opts.Webhook.Namespace, "namespace of the webhook's Service and certificate Secret")
	fs.Func("eviction-responder-priority", fmt.Sprintf("priority (%d to %d; default %d) of vacate's eviction responder vacate.dev/evacuation, which the webhook declares on pods created with the opt-in vacate.dev/eviction-responder=true where vacate coordinates EvictionRequests",
		webhook.MinResponderPriority, webhook.MaxResponderPriority, webhook.DefaultResponderPriority),
		func(s string) error {
			p, err := webhook.ParseResponderPriority(s)
			opts.Webhook.ResponderPriority = p
			return err
		})
	fs.IntVar(&opts.Controllers.EvictionWorkers, "eviction-workers", eviction.DefaultWorkers, "evictions in flight across all nodes")
	fs.IntVar(&opts.Controllers.DrainWorkers, "drain-workers", controller.DefaultDrainWorkers, "drains whose reconcile passes run at once")
	fs.Float64Var(&opts.Controllers.EvictionQPS, "eviction-qps", eviction.DefaultQPS, "eviction calls per second, first attempts and retries alike")
	fs.IntVar(&opts.Controllers.EvictionBurst, "eviction-burst", eviction.DefaultBurst, "burst of eviction calls")
	fs.DurationVar(&opts.Controllers.APITimeout, "api-timeout", eviction.DefaultCallTimeout, "bound of each eviction call and of each reconcile pass's API calls (watches are not bounded)")
	fs.BoolVar(&opts.APICompression, "api-compression", false, "ask the API server for gzip-compressed responses and watch streams: less traffic, more CPU to decompress every watch event (off: the controller runs next to the API server)")
	fs.BoolVar(&opts.Controllers.AllowLoopbackHooks, "allow-loopback-hooks", false,
		"development only: let HTTP evacuation hooks call loopback addresses (the dev cluster's simulated pods live on 127.0.0.0/8)")
	fs.StringVar(&opts.Controllers.HookServiceAccount, "hook-service-account", hook.DefaultCaller,
		"the service account (NAMESPACE/NAME) whose short-lived tokens prove to HTTP evacuation hooks who calls them: its own (the controller needs create on its serviceaccounts/token)")
	fs.Func("eviction-requests", "Kubernetes' EvictionRequest API (lifecycle.k8s.io/v1alpha1): auto (coordinate where the API server serves it; the default), coordinate (coordinate it, and drains request through it; refuse to start where it is not served), request-only (drains request through it, another coordinator runs), off (neither)",
		func(s string) error {
			m, err := controller.ParseEvictionRequestsMode(s)
			opts.Controllers.EvictionRequests = m
			return err
		})
	fs.StringVar(&opts.Controllers.ServingPods, "serving-pods", controller.ServingPodsLabelled,
		"which pods outside the drained nodes the controller watches to set their readiness condition vacate.dev/serving: labelled (those labelled vacate.dev/endpoint-aware=true, as vacate's webhook labels the pods it gates; the default) or all (every pod of the cluster, for pods that declare the gate themselves without the label: the controller then holds every pod)")
	printVersion := fs.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()
	if *printVersion {
		fmt.Println("vacate-controller " + version.Get().String())
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	klog.SetLogger(ctrl.Log)
	ctrl.Log.Info("vacate-controller", version.Get().KeysAndValues()...)
	if err := run(opts); err != nil {
		fmt.Fprintf(os.Stderr, "vacate-controller: %v\n", err)
		os.Exit(1)
	}
}

func run(opts operator.Options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading cluster configuration: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := operator.New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
