package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// cert-controller writes the Secret and the configuration with update only;
// the admission policy vacate-controller-webhook (config/admission) limits
// the configuration's update to the webhooks' CA bundle.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;update,namespace=vacate-system,resourceNames=vacate-webhook-cert
// +kubebuilder:rbac:groups="",resources=secrets,verbs=list;watch,namespace=vacate-system
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=update,resourceNames=vacate-endpoint-aware

// Options configure the webhook server of vacate-controller.
type Options struct {
	// Addr is the server's host:port; empty or "0" disables the webhook.
	Addr string
	// CertDir holds the serving certificate, tls.crt and tls.key.
	CertDir string
	// Rotate has cert-controller generate the certificate and its CA into
	// Secret SecretName in Namespace, rotate them before they expire, and
	// inject the CA into the MutatingWebhookConfiguration; the Secret is
	// mounted at CertDir. Off on the dev cluster (internal/dev/devwebhook).
	Rotate bool
	// Namespace is the controller's: its Secret and Service.
	Namespace string
	// ExtraDNSNames are more names the rotated certificate is valid for,
	// besides the Service's (a webhook reached on localhost).
	ExtraDNSNames []string
	// RotatorName names cert-controller's controller (default
	// cert-rotator): a process that runs several managers with Rotate
	// (tests) needs a name for each.
	RotatorName string
	// ResponderPriority is the priority of vacate's eviction responder that
	// the eviction-responder webhook declares (--eviction-responder-priority);
	// zero: DefaultResponderPriority.
	ResponderPriority int32
	// Coordinating: vacate coordinates EvictionRequests, so the
	// eviction-responder webhook declares its responder. Not a flag:
	// operator.New sets it from its decision at start (DecideRoles).
	Coordinating bool
}

// Enabled reports whether the webhook is served.
func (o Options) Enabled() bool { return o.Addr != "" && o.Addr != "0" }

// Server is the controller-runtime webhook server for o.
func (o Options) Server() (crwebhook.Server, error) {
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("--webhook-bind-address %q: %w", o.Addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("--webhook-bind-address %q: the port must be a number from 1 to 65535", o.Addr)
	}
	if o.CertDir == "" {
		return nil, errors.New("--webhook-cert-dir must name the directory of the serving certificate")
	}
	if err := ValidateResponderPriority(o.ResponderPriority); err != nil {
		return nil, err
	}
	return crwebhook.NewServer(crwebhook.Options{Host: host, Port: p, CertDir: o.CertDir}), nil
}

// DNSName is the name the API server calls the webhook by in a cluster.
func (o Options) DNSName() string { return ServiceName + "." + o.Namespace + ".svc" }

// Register serves the PodGate, the ResponderGate and the PolicyGate on the
// manager's webhook server. Under Rotate it first waits, in the
// background, for cert-controller to have written the certificate (the
// server reads it when it starts), which it injects into both
// configurations.
func Register(mgr manager.Manager, o Options) error {
	decoder := admission.NewDecoder(mgr.GetScheme())
	pods := &crwebhook.Admission{Handler: &PodGate{Namespaces: mgr.GetClient(), Decoder: decoder}}
	responders := &crwebhook.Admission{Handler: &ResponderGate{Reader: mgr.GetClient(), Decoder: decoder,
		Coordinating: o.Coordinating, Priority: o.ResponderPriority, ControllerNamespace: o.Namespace}}
	drains := &crwebhook.Admission{Handler: &PolicyGate{Reader: mgr.GetClient(), Decoder: decoder}}
	register := func() {
		mgr.GetWebhookServer().Register(Path, pods)
		mgr.GetWebhookServer().Register(ResponderPath, responders)
		mgr.GetWebhookServer().Register(NodeDrainPath, drains)
	}
	if !o.Rotate {
		register()
		return nil
	}
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: SecretName},
		CertDir:        o.CertDir,
		CAName:         "vacate-webhook-ca",
		CAOrganization: "vacate",
		DNSName:        o.DNSName(),
		ExtraDNSNames:  o.ExtraDNSNames,
		IsReady:        ready,
		ControllerName: o.RotatorName,
		Webhooks: []rotator.WebhookInfo{{Name: ConfigurationName, Type: rotator.Mutating},
			{Name: NodeDrainConfigurationName, Type: rotator.Validating}},
	})
	if err != nil {
		return fmt.Errorf("setting up the webhook's certificate rotation: %w", err)
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		select {
		case <-ready:
			register()
		case <-ctx.Done():
		}
		return nil
	}))
}
