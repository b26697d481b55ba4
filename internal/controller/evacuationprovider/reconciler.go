// Package evacuationprovider keeps the finalizer vacate.dev/evacuations on
// every EvacuationProvider, so that deleting a provider mid-evacuation (an
// uninstall, a chart reinstall, a GitOps replace) leaves it in place,
// visibly being deleted, until the evacuations it took on are finished,
// cancelled, released or gone. It is the model of Kubernetes' own PVC
// protection: the finalizer is on every live object, and only a deleted
// one is examined, first in the cache, then, before the finalizer goes,
// in a list read from the API server itself. Removing it from a live
// provider whenever none of its evacuations was unfinished could race the
// NodeDrain controller creating one (the cache had not yet seen it), and
// a deletion right after would lose the provider mid-evacuation. The
// NodeDrain controller also adds the finalizer before it creates an
// Evacuation (AddFinalizer), for a provider registered a moment ago.
package evacuationprovider

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// +kubebuilder:rbac:groups=vacate.dev,resources=evacuationproviders,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=vacate.dev,resources=evacuations,verbs=get;list;watch

// Unfinished reports whether an Evacuation still needs its provider: it is
// not released, not going away for good (being deleted without vacate's
// finalizer vacate.dev/cancel, which keeps it until its cancel), and its
// provider has not answered the current request (Completed for Evacuate,
// Cancelled for Cancel) for the current generation.
func Unfinished(ev *v1alpha1.Evacuation) bool {
	if (!ev.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel)) || ev.Spec.Release != nil {
		return false
	}
	current := ev.Generation > 0 && ev.Status.ObservedGeneration == ev.Generation
	switch ev.Spec.Desired {
	case v1alpha1.DesiredCancel:
		return !(current && ev.Status.Phase == v1alpha1.EvacuationCancelled)
	default:
		return !(current && ev.Status.Phase == v1alpha1.EvacuationCompleted)
	}
}

// AddFinalizer puts the finalizer on a provider that is not being deleted
// (the API refuses new finalizers on one that is). It reports whether the
// provider holds it, so the caller asks nothing of a provider on its way out;
// a provider gone meanwhile holds nothing (false, no error). p becomes the
// provider as written only once the write succeeded.
func AddFinalizer(ctx context.Context, c client.Client, p *v1alpha1.EvacuationProvider) (bool, error) {
	if controllerutil.ContainsFinalizer(p, v1alpha1.FinalizerEvacuations) {
		return true, nil
	}
	if !p.DeletionTimestamp.IsZero() {
		return false, nil
	}
	updated := p.DeepCopy()
	controllerutil.AddFinalizer(updated, v1alpha1.FinalizerEvacuations)
	err := c.Patch(ctx, updated, client.MergeFromWithOptions(p, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("adding finalizer %s to EvacuationProvider %s: %w", v1alpha1.FinalizerEvacuations, p.Name, err)
	}
	*p = *updated
	return true, nil
}

// Reconciler keeps the finalizer on live providers and takes it off a
// deleted one once no unfinished Evacuation names it.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache: the finalizer goes only when the API
	// server itself lists no unfinished Evacuation of the provider.
	APIReader client.Reader
}

// Reconcile adds the finalizer to a live provider and removes it from a
// deleted one that no unfinished Evacuation names.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := &v1alpha1.EvacuationProvider{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if p.DeletionTimestamp.IsZero() {
		_, err := AddFinalizer(ctx, r.Client, p)
		return reconcile.Result{}, ignoreConflict(err)
	}
	if !controllerutil.ContainsFinalizer(p, v1alpha1.FinalizerEvacuations) {
		return reconcile.Result{}, nil
	}
	log := logf.FromContext(ctx).WithValues("evacuationProvider", p.Name)
	// The cache first (most deleted providers with work are seen there),
	// then the API server, so an Evacuation created a moment ago counts.
	for _, reader := range []client.Reader{r.Client, r.APIReader} {
		unfinished, err := unfinishedOf(ctx, reader, p.Name)
		if err != nil {
			return reconcile.Result{}, err
		}
		if len(unfinished) > 0 {
			log.Info("provider deleted while evacuating: it stays until its evacuations are finished, cancelled or released", "evacuations", unfinished)
			return reconcile.Result{}, nil
		}
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(p, v1alpha1.FinalizerEvacuations)
	log.Info("releasing the deleted provider: no unfinished evacuation names it")
	if err := r.Client.Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, ignoreConflict(fmt.Errorf("removing finalizer %s from EvacuationProvider %s: %w", v1alpha1.FinalizerEvacuations, p.Name, err))
	}
	return reconcile.Result{}, nil
}

// unfinishedOf names the unfinished Evacuations of the provider.
func unfinishedOf(ctx context.Context, reader client.Reader, provider string) ([]string, error) {
	list := &v1alpha1.EvacuationList{}
	if err := reader.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing Evacuations: %w", err)
	}
	var unfinished []string
	for i := range list.Items {
		if ev := &list.Items[i]; ev.Spec.Provider == provider && Unfinished(ev) {
			unfinished = append(unfinished, ev.Name)
		}
	}
	return unfinished, nil
}

// ignoreConflict: a lost optimistic lock brings its own watch event.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// SetupWithManager watches providers and the Evacuations that name them.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("evacuationprovider").
		For(&v1alpha1.EvacuationProvider{}).
		Watches(&v1alpha1.Evacuation{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.(*v1alpha1.Evacuation).Spec.Provider}}}
		})).
		Complete(r)
}
