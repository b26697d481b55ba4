// Package index holds the cache indexes the controllers list by.
package index

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vacate-dev/vacate/internal/surge"
)

// PodNodeName indexes cached pods by spec.nodeName.
const PodNodeName = "spec.nodeName"

// Register adds the EndpointSlice index to a manager's cache that holds
// every slice: a test's. vacate-controller caches pods and EndpointSlices
// by scope (internal/controller/scoped), and its client (controller.
// PodClient) filters by these indexes' functions.
func Register(ctx context.Context, mgr manager.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, EndpointPod, EndpointPodsOf)
}

// RegisterPods adds the pod indexes (PodNodeName, Surge) to a manager's
// cache that holds every pod: a test's, running one controller alone with
// the manager's client. Calling it starts that cache's pod informer.
func RegisterPods(ctx context.Context, mgr manager.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodNodeName, NodeNameOf); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, Surge, SurgeKeysOf)
}

// EvictionTarget indexes cached EvictionRequests and Evictions
// (lifecycle.k8s.io/v1alpha1) by their target pod's name.
const EvictionTarget = "spec.target.pod.name"

// RegisterEvictionRequests adds the EvictionTarget indexes, where vacate
// coordinates or requests through the EvictionRequest API (the API server
// serves it).
func RegisterEvictionRequests(ctx context.Context, mgr manager.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &lifecyclev1alpha1.EvictionRequest{}, EvictionTarget, func(o client.Object) []string {
		if p := o.(*lifecyclev1alpha1.EvictionRequest).Spec.Target.Pod; p != nil {
			return []string{p.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing EvictionRequests by target: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &lifecyclev1alpha1.Eviction{}, EvictionTarget, func(o client.Object) []string {
		if p := o.(*lifecyclev1alpha1.Eviction).Spec.Target.Pod; p != nil {
			return []string{p.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing Evictions by target: %w", err)
	}
	return nil
}

// Surge indexes cached replacement pods (internal/surge) by the drain that
// brought them up.
const Surge = "vacate.dev/surge-drain"

// SurgeKeysOf is the Surge index's value of a pod: none unless it is a
// replacement.
func SurgeKeysOf(o client.Object) []string {
	p := o.(*corev1.Pod)
	d := p.Labels[surge.LabelDrain]
	if d == "" || p.Labels[surge.LabelOf] == "" {
		return nil
	}
	return []string{d}
}

// EndpointPod indexes cached EndpointSlices by the UIDs of the pods their
// endpoints point to: an endpoint-aware pod's slices are found without
// listing its namespace's.
const EndpointPod = "vacate.dev/endpoint-pod"

// EndpointPodsOf is the EndpointPod index's values of an EndpointSlice.
func EndpointPodsOf(o client.Object) []string {
	var out []string
	for _, ep := range o.(*discoveryv1.EndpointSlice).Endpoints {
		if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.UID != "" {
			out = append(out, string(ep.TargetRef.UID))
		}
	}
	return out
}

// SlicesOfPod lists from the cache the EndpointSlices that list the pod.
func SlicesOfPod(ctx context.Context, c client.Reader, pod *corev1.Pod) ([]discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, list, client.InNamespace(pod.Namespace), client.MatchingFields{EndpointPod: string(pod.UID)}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// NodeNameOf is the PodNodeName index's value of a pod.
func NodeNameOf(o client.Object) []string {
	if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// NodePods reads the pods bound to a node. They are the cache's own
// objects, which the caller must not change. vacate-controller's reads its
// node's scope of the pod cache (controller.Setup), waiting until the
// scope is listed whole.
type NodePods func(ctx context.Context, node string) ([]*corev1.Pod, error)

// Or is n, or, when n is unset, ListedNodePods of c.
func (n NodePods) Or(c client.Reader) NodePods {
	if n != nil {
		return n
	}
	return ListedNodePods(c)
}

// ListedNodePods reads a node's pods with List, by the PodNodeName index,
// from any reader (a fake client in tests).
func ListedNodePods(c client.Reader) NodePods {
	return func(ctx context.Context, node string) ([]*corev1.Pod, error) { return PodsOnNode(ctx, c, node) }
}

// PodsOnNode lists the node's pods from the cache, without copies: they
// are the cache's own objects, which the caller must not change (a change
// goes to the API server, or to a DeepCopy, as policy.AsDrained does).
// Copies of every pod of the node for every pass were a twelfth of the
// controller's CPU at 10,000 pods, and most of what a pass allocates.
func PodsOnNode(ctx context.Context, c client.Reader, node string) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.MatchingFields{PodNodeName: node}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	return pods, nil
}

// AnySelected says whether a pod of the namespace matches the selector
// (a PodDisruptionBudget's: nil selects nothing, {} everything).
func AnySelected(pods []*corev1.Pod, namespace string, sel labels.Selector) bool {
	for _, p := range pods {
		if p.Namespace == namespace && sel.Matches(labels.Set(p.Labels)) {
			return true
		}
	}
	return false
}

// PDBs lists every PodDisruptionBudget from the cache, without copies:
// they are the cache's own objects, which the caller must not change. (A
// drain's pass plans with them after every change of a PDB it waits on; deep
// copies of every PDB of the cluster for each pass were a third of the
// controller's allocations with 208 PDBs.)
func PDBs(ctx context.Context, c client.Reader) ([]*policyv1.PodDisruptionBudget, error) {
	list := &policyv1.PodDisruptionBudgetList{}
	if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	out := make([]*policyv1.PodDisruptionBudget, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// RegisterAll is Register and RegisterPods: the indexes of a test's
// manager that caches every pod.
func RegisterAll(ctx context.Context, mgr manager.Manager) error {
	if err := Register(ctx, mgr); err != nil {
		return err
	}
	return RegisterPods(ctx, mgr)
}
