package evacuation

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Scheme knows vacate's kinds (Evacuation, EvacuationProvider, NodeDrain,
// DrainPolicy) and Kubernetes' own, for a provider's manager or client.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewClient is a typed client for vacate's kinds and Kubernetes' own, for
// providers that read Evacuations outside a manager (a CLI, a script).
func NewClient(cfg *rest.Config) (client.Client, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("creating a client for vacate's kinds: %w", err)
	}
	return c, nil
}

// Register registers the provider with vacate: it creates or updates its
// EvacuationProvider object with spec, so a provider can declare itself at
// start-up instead of shipping a manifest.
func Register(ctx context.Context, c client.Client, name string, spec v1alpha1.EvacuationProviderSpec) error {
	p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := controllerutil.CreateOrUpdate(ctx, c, p, func() error {
		p.Spec = spec
		return nil
	})
	if err != nil {
		return fmt.Errorf("registering EvacuationProvider %s: %w", name, err)
	}
	return nil
}
