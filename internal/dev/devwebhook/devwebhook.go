// Package devwebhook installs vacate-controller's admission webhook
// configurations on the dev cluster, whose API server reaches this
// machine's loopback, with controller-runtime's envtest certificates: for
// tests and the demo only. vacate-controller never links it (a cluster's
// webhooks get their certificate from cert-controller: internal/webhook).
package devwebhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vacate-dev/vacate/internal/webhook"
)

// Local is a webhook configuration installed on the dev cluster, reached
// on loopback.
type Local struct {
	install envtest.WebhookInstallOptions
}

// Addr is the address the webhook server must listen on.
func (l *Local) Addr() string {
	return net.JoinHostPort(l.install.LocalServingHost, strconv.Itoa(l.install.LocalServingPort))
}

// CertDir holds the serving certificate.
func (l *Local) CertDir() string { return l.install.LocalServingCertDir }

// Uninstall deletes the configuration it installed and the certificate
// directory.
func (l *Local) Uninstall(ctx context.Context, cs kubernetes.Interface) error {
	var errs []error
	for _, m := range l.install.MutatingWebhooks {
		errs = append(errs, cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}))
	}
	for _, v := range l.install.ValidatingWebhooks {
		errs = append(errs, cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, v.Name, metav1.DeleteOptions{}))
	}
	for i, err := range errs {
		if apierrors.IsNotFound(err) {
			errs[i] = nil
		}
	}
	return errors.Join(append(errs, l.install.Cleanup())...)
}

// Install installs the MutatingWebhookConfiguration on a cluster
// whose API server reaches this machine's loopback (the dev cluster), with
// controller-runtime's envtest: a CA and a serving certificate for
// localhost in a new directory, a free port, and the configuration's
// clientConfig rewritten to https://127.0.0.1:port with its caBundle.
func Install(cfg *rest.Config, controllerNamespace string) (*Local, error) {
	path := webhook.Path
	cc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: controllerNamespace, Name: webhook.ServiceName, Path: &path}}
	l := &Local{install: envtest.WebhookInstallOptions{
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{webhook.Configuration(cc, controllerNamespace)},
		LocalServingHost: "127.0.0.1",
	}}
	if err := l.install.Install(cfg); err != nil {
		return nil, fmt.Errorf("installing the endpoint-aware webhook on the dev cluster: %w", err)
	}
	return l, nil
}

// InstallNodeDrainPolicy installs the NodeDrain policy webhook's
// ValidatingWebhookConfiguration on the dev cluster, as Install does
// the endpoint-aware one: with a serving certificate for localhost of its
// own and a free port, where a controller must then serve its webhooks.
func InstallNodeDrainPolicy(cfg *rest.Config, controllerNamespace string) (*Local, error) {
	path := webhook.NodeDrainPath
	cc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: controllerNamespace, Name: webhook.ServiceName, Path: &path}}
	l := &Local{install: envtest.WebhookInstallOptions{
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{webhook.NodeDrainConfiguration(cc)},
		LocalServingHost:   "127.0.0.1",
	}}
	if err := l.install.Install(cfg); err != nil {
		return nil, fmt.Errorf("installing the NodeDrain policy webhook on the dev cluster: %w", err)
	}
	return l, nil
}
