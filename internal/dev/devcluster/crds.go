package devcluster

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/vacate-dev/vacate/config/crd"
)

// InstallCRDs creates or updates vacate's CRDs and waits until the API
// server serves them.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating apiextensions client: %w", err)
	}
	crds, err := crd.CRDs()
	if err != nil {
		return err
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	for _, want := range crds {
		// Several tests may install at once: retry on conflicts and races.
		err := retry.OnError(retry.DefaultRetry, func(err error) bool {
			return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
		}, func() error {
			got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err = api.Create(ctx, want, metav1.CreateOptions{})
			case err == nil:
				want.ResourceVersion = got.ResourceVersion
				_, err = api.Update(ctx, want, metav1.UpdateOptions{})
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", want.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be established: %w", want.Name, err)
		}
	}
	return nil
}
