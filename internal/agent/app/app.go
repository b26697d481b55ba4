// Package app is the vacate-agent program: its flags, the sources they
// choose, a client that reads only the agent's own node and NodeDrain, and
// the metrics endpoint. cmd/vacate-agent only calls Main.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/agent/aws"
	"github.com/vacate-dev/vacate/internal/agent/azure"
	"github.com/vacate-dev/vacate/internal/agent/gcp"
	"github.com/vacate-dev/vacate/internal/agent/logind"
	"github.com/vacate-dev/vacate/internal/version"
	"github.com/vacate-dev/vacate/internal/version/buildinfo"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// Clouds --cloud accepts.
const (
	CloudAuto  = "auto"
	CloudAWS   = "aws"
	CloudGCP   = "gcp"
	CloudAzure = "azure"
	CloudNone  = "none"
)

// Options are the agent's flags.
type Options struct {
	Kubeconfig string
	Node       string
	Policy     string

	// Logind watches logind for shutdowns.
	Logind       bool
	DBusAddress  string
	ShutdownWant time.Duration
	PoweroffMode string

	OnSigterm bool
	Deadline  time.Duration

	Cloud            string
	MetadataEndpoint string
	AWSRebalance     string
	AzureFreeze      string

	MetricsAddr string
}

// bind registers the flags on fs, with their defaults in o.
func (o *Options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else the in-cluster service account)")
	fs.StringVar(&o.Node, "node", os.Getenv("NODE_NAME"), "the node this agent runs on (default: $NODE_NAME, from the downward API in a pod)")
	fs.StringVar(&o.Policy, "policy", "", "DrainPolicy of the drains the agent requests (default: the policy that selects the node)")
	fs.BoolVar(&o.Logind, "logind", true, "hold a logind delay inhibitor lock and drain on shutdown or reboot (default: on, off with --on-sigterm)")
	fs.StringVar(&o.DBusAddress, "dbus-address", "", "D-Bus address of logind's bus (default: the system bus)")
	fs.DurationVar(&o.ShutdownWant, "shutdown-delay", 2*time.Minute,
		"how long a shutdown should wait for the drain; logind's InhibitDelayMaxSec caps it, and the agent reports (never changes) a shorter one")
	fs.StringVar(&o.PoweroffMode, "poweroff-mode", string(v1alpha1.ModeDecommission),
		"drain mode on a poweroff (Decommission or Maintenance); a reboot is always Maintenance")
	fs.BoolVar(&o.OnSigterm, "on-sigterm", false, "signal mode: on SIGTERM request the drain, exit when Drained or at --deadline")
	fs.DurationVar(&o.Deadline, "deadline", 5*time.Minute, "signal mode: how long the agent holds the stop")
	fs.StringVar(&o.Cloud, "cloud", CloudAuto, "cloud whose notices to watch: aws, gcp, azure, none, or auto (from the node's spec.providerID)")
	fs.StringVar(&o.MetadataEndpoint, "metadata-endpoint", "", "base URL of the cloud's metadata service (default: the cloud's own)")
	fs.StringVar(&o.AWSRebalance, "aws-rebalance", "cordon", "an AWS rebalance recommendation: cordon (taint only) or drain")
	fs.StringVar(&o.AzureFreeze, "azure-freeze", "cordon", "an Azure Freeze event: cordon (taint only) or drain")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8095", "address of /metrics; 0 disables it")
}

// Main runs the agent with the command line args and returns the exit
// code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vacate-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	o.bind(fs)
	printVersion := fs.Bool("version", false, "print the version and exit")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *printVersion {
		fmt.Fprintln(stdout, "vacate-agent "+version.Get().String())
		return 0
	}
	logindSet := false
	fs.Visit(func(f *flag.Flag) { logindSet = logindSet || f.Name == "logind" })
	if o.OnSigterm && !logindSet {
		o.Logind = false
	}
	log := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr))
	log.Info("vacate-agent", version.Get().KeysAndValues()...)
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "vacate-agent: %v\n", err)
		return 2
	}
	if err := Run(context.Background(), o, log); err != nil {
		fmt.Fprintf(stderr, "vacate-agent: %v\n", err)
		return 1
	}
	return 0
}

func (o *Options) validate() error {
	var errs []error
	if o.Node == "" {
		errs = append(errs, errors.New("--node is required (or $NODE_NAME, from the downward API in a pod)"))
	}
	switch o.Cloud {
	case CloudAuto, CloudAWS, CloudGCP, CloudAzure, CloudNone:
	default:
		errs = append(errs, fmt.Errorf("--cloud %q: choose aws, gcp, azure, none or auto", o.Cloud))
	}
	if o.MetadataEndpoint != "" && (o.Cloud == CloudNone || o.Cloud == CloudAuto) {
		errs = append(errs, errors.New("--metadata-endpoint needs --cloud aws, gcp or azure: say whose metadata service it is"))
	}
	for flagName, v := range map[string]string{"--aws-rebalance": o.AWSRebalance, "--azure-freeze": o.AzureFreeze} {
		if v != "cordon" && v != "drain" {
			errs = append(errs, fmt.Errorf("%s %q: choose cordon or drain", flagName, v))
		}
	}
	if m := v1alpha1.DrainMode(o.PoweroffMode); m != v1alpha1.ModeDecommission && m != v1alpha1.ModeMaintenance {
		errs = append(errs, fmt.Errorf("--poweroff-mode %q: choose Decommission or Maintenance", o.PoweroffMode))
	}
	if o.OnSigterm && o.Deadline <= 0 {
		errs = append(errs, fmt.Errorf("--deadline %s: must be positive", o.Deadline))
	}
	if o.ShutdownWant <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-delay %s: must be positive", o.ShutdownWant))
	}
	return errors.Join(errs...)
}

// Run runs the agent until it is told to stop (SIGINT, or SIGTERM outside
// signal mode) or, in signal mode, until the node is drained or the
// deadline came.
func Run(ctx context.Context, o Options, log logr.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	c, err := ownClient(ctx, cfg, o.Node)
	if err != nil {
		return err
	}

	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGINT)
	var sigterm chan os.Signal
	if o.OnSigterm {
		sigterm = make(chan os.Signal, 1)
		signal.Notify(sigterm, syscall.SIGTERM)
	} else {
		signal.Notify(stop, syscall.SIGTERM)
	}
	defer signal.Stop(stop)
	go func() {
		select {
		case s := <-stop:
			log.Info("stopping", "signal", s.String())
			cancel()
		case <-ctx.Done():
		}
	}()

	sources, err := o.sources(ctx, c, log)
	if err != nil {
		return err
	}
	var done <-chan struct{} // signal mode: closed when the agent is done
	if o.OnSigterm {
		// The first SIGTERM is the notice; a second one stops the agent at
		// once (systemd's stop after TimeoutStopSec, or a person).
		first := make(chan os.Signal, 1)
		go func() {
			n := 0
			for {
				select {
				case s := <-sigterm:
					if n++; n == 1 {
						first <- s
						continue
					}
					log.Info("stopping at once: a second signal", "signal", s.String())
					cancel()
					return
				case <-ctx.Done():
					return
				}
			}
		}()
		sig := &agent.SignalSource{Signals: first, Deadline: o.Deadline, Mode: v1alpha1.ModeMaintenance}
		sources = append(sources, sig)
		done = sig.Done()
	}
	metrics := agent.NewMetrics()
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg); err != nil {
		return err
	}
	if err := reg.Register(buildinfo.Collector("vacate-agent", version.Get())); err != nil {
		return err
	}
	if err := serveMetrics(ctx, o.MetricsAddr, reg, log); err != nil {
		return err
	}
	names := make([]string, 0, len(sources))
	for _, s := range sources {
		names = append(names, s.Name())
	}
	log.Info("vacate-agent started", "node", o.Node, "sources", strings.Join(names, ","))
	a := agent.New(agent.Options{Client: c, Node: o.Node, Sources: sources, PolicyName: o.Policy, Metrics: metrics, Log: log})
	go func() {
		select {
		case <-done: // signal mode: the node is drained, or the deadline came
			log.Info("the drain is done or its deadline came; exiting so the stop goes on")
			cancel()
		case <-ctx.Done():
		}
	}()
	return a.Run(ctx)
}

// sources are the sources the options choose.
func (o Options) sources(ctx context.Context, c client.Client, log logr.Logger) ([]agent.Source, error) {
	var out []agent.Source
	if o.Logind {
		out = append(out, logind.New(logind.Options{Address: o.DBusAddress, Want: o.ShutdownWant,
			PoweroffMode: v1alpha1.DrainMode(o.PoweroffMode), Log: log.WithName("logind")}))
	}
	cloud := o.Cloud
	if cloud == CloudAuto {
		node := &corev1.Node{}
		if err := c.Get(ctx, types.NamespacedName{Name: o.Node}, node); err != nil {
			return nil, fmt.Errorf("reading node %s to find its cloud: %w", o.Node, err)
		}
		cloud = CloudOf(node.Spec.ProviderID)
		log.Info("cloud detected from the node's providerID", "providerID", node.Spec.ProviderID, "cloud", cloud)
	}
	switch cloud {
	case CloudAWS:
		s, err := aws.New(aws.Options{Endpoint: o.MetadataEndpoint, RebalanceDrain: o.AWSRebalance == "drain", Log: log.WithName("aws")})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	case CloudGCP:
		out = append(out, gcp.New(gcp.Options{Endpoint: o.MetadataEndpoint, Log: log.WithName("gcp")}))
	case CloudAzure:
		out = append(out, azure.New(azure.Options{Endpoint: o.MetadataEndpoint, FreezeDrain: o.AzureFreeze == "drain", Log: log.WithName("azure")}))
	}
	if len(out) == 0 && !o.OnSigterm {
		return nil, fmt.Errorf("nothing to watch: logind is off (--logind=false), no cloud (--cloud %s) and no --on-sigterm", cloud)
	}
	return out, nil
}

// CloudOf is the cloud of a node's spec.providerID ("aws:///...",
// "gce://...", "azure:///..."), or none.
func CloudOf(providerID string) string {
	scheme, _, _ := strings.Cut(providerID, "://")
	switch scheme {
	case "aws":
		return CloudAWS
	case "gce":
		return CloudGCP
	case "azure":
		return CloudAzure
	}
	return CloudNone
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the cluster configuration: %w", err)
	}
	cfg.UserAgent = "vacate-agent"
	return cfg, nil
}

// ownClient is a client whose reads come from a cache of the agent's own
// node and NodeDrain only (watches with a field selector on the name): an
// agent on every node of a large cluster costs the API server one watch
// each, not a read a second.
func ownClient(ctx context.Context, cfg *rest.Config, node string) (client.Client, error) {
	scheme, err := evacuation.Scheme()
	if err != nil {
		return nil, err
	}
	own := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", node)}
	cc, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}: own, &v1alpha1.NodeDrain{}: own,
	}, ReaderFailOnMissingInformer: true})
	if err != nil {
		return nil, fmt.Errorf("building the cache: %w", err)
	}
	for _, o := range []client.Object{&corev1.Node{}, &v1alpha1.NodeDrain{}} {
		if _, err := cc.GetInformer(ctx, o); err != nil {
			return nil, fmt.Errorf("watching %T: %w", o, err)
		}
	}
	go func() { _ = cc.Start(ctx) }()
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cc.WaitForCacheSync(syncCtx) {
		return nil, errors.New("reading the node and its NodeDrain did not finish within a minute: are vacate's CRDs installed and may the agent list and watch nodes and nodedrains?")
	}
	return client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: cc}})
}

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log logr.Logger) error {
	if addr == "" || addr == "0" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "metrics endpoint stopped")
		}
	}()
	log.Info("serving metrics", "address", l.Addr().String())
	return nil
}
