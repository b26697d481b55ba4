package nodedrain

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/evacuationprovider"
	"github.com/vacate-dev/vacate/internal/providers"
)

// ask makes sure a provider that takes part in this drain has its
// Evacuation, recording the leaving pods it protects now. A provider is
// asked when it protects leaving pods, or, in Decommission, always (a
// DaemonSet storage agent or data whose consumers run elsewhere must move
// too; a provider with nothing there answers Completed at once). A provider
// being deleted is asked nothing new, but what it was asked still holds.
// It returns the Evacuation, or nil when the provider is not asked.
func (r *Reconciler) ask(ctx context.Context, s *scope, p *v1alpha1.EvacuationProvider, leaving []*corev1.Pod, have *v1alpha1.Evacuation) (*v1alpha1.Evacuation, error) {
	mode := s.drain.Mode()
	if !providers.Eligible(p, mode) {
		return nil, nil
	}
	protected, err := r.protectedBy(ctx, p, leaving)
	if err != nil {
		return nil, err
	}
	if !providers.Asks(p, mode, len(protected), have != nil && ours(have, s.drain, s.node)) {
		return nil, nil // it protects nothing that leaves
	}
	// The finalizer first: the provider cannot vanish while the Evacuation
	// it is asked for is unfinished.
	if ok, err := evacuationprovider.AddFinalizer(ctx, r.Client, p); err != nil || !ok {
		return nil, err
	}
	return r.ensureEvacuation(ctx, s.drain, s.node, p, protected, have)
}

// ours reports whether an Evacuation was asked by this drain for this node.
func ours(ev *v1alpha1.Evacuation, nd *v1alpha1.NodeDrain, node *corev1.Node) bool {
	return providers.AskedFor(ev, nd.UID, node.UID)
}

// evacuationsOf are the Evacuations of the drain's node, by provider name,
// those being deleted included (the finalizer vacate.dev/cancel keeps them
// until their provider was asked to cancel; their holds stay until then).
func (r *Reconciler) evacuationsOf(ctx context.Context, nd *v1alpha1.NodeDrain) (map[string]*v1alpha1.Evacuation, error) {
	list := &v1alpha1.EvacuationList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing Evacuations: %w", err)
	}
	out := map[string]*v1alpha1.Evacuation{}
	for i := range list.Items {
		ev := &list.Items[i]
		if ev.Spec.NodeName == nd.Spec.NodeName {
			out[ev.Spec.Provider] = ev
		}
	}
	return out, nil
}

// protectedBy are the leaving pods that the provider protects
// (providers.Protected).
func (r *Reconciler) protectedBy(ctx context.Context, p *v1alpha1.EvacuationProvider, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	return providers.Protected(p, pods, r.namespaceLabels(ctx))
}

// selector reports whether a provider's selectors pick a pod
// (providers.Selects).
func (r *Reconciler) selector(ctx context.Context) func(*v1alpha1.EvacuationProvider, *corev1.Pod) (bool, error) {
	labelsOf := r.namespaceLabels(ctx)
	return func(p *v1alpha1.EvacuationProvider, pod *corev1.Pod) (bool, error) {
		return providers.Selects(p, pod, labelsOf)
	}
}

// itemsOf are the providers of a list.
func itemsOf(list *v1alpha1.EvacuationProviderList) []*v1alpha1.EvacuationProvider {
	out := make([]*v1alpha1.EvacuationProvider, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

// ensureEvacuation creates the drain's Evacuation for the provider, or
// brings the one there up to date (providers.Request: what 'vacate plan'
// forecasts too). It carries the finalizer vacate.dev/cancel, which only vacate removes, once the
// provider was asked to cancel or its work is kept: deleting the drain in
// the foreground, or the Evacuation itself, never skips the cancel.
func (r *Reconciler) ensureEvacuation(ctx context.Context, nd *v1alpha1.NodeDrain, node *corev1.Node, p *v1alpha1.EvacuationProvider, protected []*corev1.Pod, ev *v1alpha1.Evacuation) (*v1alpha1.Evacuation, error) {
	name := v1alpha1.EvacuationName(nd.Spec.NodeName, p.Name)
	want := providers.Request(nd, node, p, protected, ev)
	if ev == nil {
		ev = &v1alpha1.Evacuation{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.FinalizerCancel}}, Spec: want}
		if err := controllerutil.SetOwnerReference(nd, ev, r.Client.Scheme()); err != nil {
			return nil, err
		}
		if err := r.Client.Create(ctx, ev); err != nil {
			return nil, fmt.Errorf("creating Evacuation %s: %w", name, err) // AlreadyExists: the cache is behind; the next pass reads it
		}
		return ev, nil
	}
	if equality.Semantic.DeepEqual(ev.Spec, want) && controllerutil.ContainsFinalizer(ev, v1alpha1.FinalizerCancel) {
		return ev, nil
	}
	patch := ctrl.MergeFromWithOptions(ev.DeepCopy(), ctrl.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(ev, v1alpha1.FinalizerCancel) // in case someone removed it
	if !ours(ev, nd, node) {                                  // left by an earlier drain, asked for one pod's Eviction, or for a node of the same name before: this drain takes it over
		ev.OwnerReferences = nil
		delete(ev.Labels, v1alpha1.LabelEviction)
		if err := controllerutil.SetOwnerReference(nd, ev, r.Client.Scheme()); err != nil {
			return nil, err
		}
	}
	ev.Spec = want
	if err := r.Client.Patch(ctx, ev, patch); err != nil {
		return nil, err // a conflict is retried by the caller
	}
	return ev, nil
}
