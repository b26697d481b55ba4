package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/scoped"
	"github.com/vacate-dev/vacate/internal/surge"
)

// Pods is the controller's pod cache: scoped to the work
// (internal/controller/scoped), never the cluster's pods.
type Pods = scoped.Cache[*corev1.Pod]

// Which pods the controller watches outside the nodes it drains, for the
// serving controller (endpoint-aware eviction): --serving-pods.
const (
	// ServingPodsLabelled: the pods labelled vacate.dev/endpoint-aware=true,
	// as vacate's webhook labels every pod it gates (the default).
	ServingPodsLabelled = "labelled"
	// ServingPodsAll: every pod of the cluster, for clusters whose pods
	// declare the gate themselves without the label (the cost of an
	// unscoped cache).
	ServingPodsAll = "all"
)

// NewPods makes the pod cache, watching permanently the replacements of
// surges (which decisions read in any namespace) and the pods the serving
// controller sets the condition of (servingPods). Scopes of drained nodes
// come and go with the drains (Setup).
func NewPods(cfg *rest.Config, transform toolscache.TransformFunc, servingPods string) (*Pods, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the pod cache's client: %w", err)
	}
	permanent := []scoped.Scope{scoped.Labelled(surge.LabelOf)}
	switch servingPods {
	case "", ServingPodsLabelled:
		permanent = append(permanent, scoped.Scope{Label: v1alpha1.LabelEndpointAware + "=true"})
	case ServingPodsAll:
		permanent = append(permanent, scoped.Everything())
	default:
		return nil, fmt.Errorf("--serving-pods %q: must be %s or %s", servingPods, ServingPodsLabelled, ServingPodsAll)
	}
	return scoped.New(&corev1.Pod{}, func() runtime.Object { return &corev1.PodList{} }, scoped.Options{
		Client: cs.CoreV1().RESTClient(), Resource: "pods", Transform: transform, Permanent: permanent,
	}), nil
}

// Slices is the controller's EndpointSlice cache: a namespace's slices,
// watched while a drain reads them (its endpoint-aware pods, a surge's
// replacement), never the cluster's.
type Slices = scoped.Cache[*discoveryv1.EndpointSlice]

// NewSlices makes the EndpointSlice cache. A namespace's scope is stopped a
// minute after its last read.
func NewSlices(cfg *rest.Config, transform toolscache.TransformFunc) (*Slices, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the EndpointSlice cache's client: %w", err)
	}
	return scoped.New(&discoveryv1.EndpointSlice{}, func() runtime.Object { return &discoveryv1.EndpointSliceList{} }, scoped.Options{
		Client: cs.DiscoveryV1().RESTClient(), Resource: "endpointslices", Transform: transform,
	}), nil
}

// PodClient reads pods and EndpointSlices from the scoped caches, and
// everything else as c does. A pod no scope holds is read from the API
// server (live), unless a scope saw it deleted. A list of pods must name
// its scope: a node (index.PodNodeName), a drain's replacements
// (index.Surge), or the replacements' label; a list of EndpointSlices, a
// namespace. Any other is refused, so that no code path reads the
// cluster's pods or slices by accident.
type PodClient struct {
	client.Client
	Pods   *Pods
	Slices *Slices
	Live   client.Reader
}

// Get reads a pod from its scope, or the API server.
func (c PodClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		if _, slice := obj.(*discoveryv1.EndpointSlice); slice && c.Slices != nil {
			return c.Live.Get(ctx, key, obj, opts...)
		}
		return c.Client.Get(ctx, key, obj, opts...)
	}
	switch got, state := c.Pods.Get(key.Namespace, key.Name); state {
	case scoped.Found:
		got.DeepCopyInto(pod)
		return nil
	case scoped.Gone:
		return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	return c.Live.Get(ctx, key, obj, opts...)
}

// List lists pods, or EndpointSlices, from the scope the options name.
func (c PodClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := &client.ListOptions{}
	lo.ApplyOptions(opts)
	if slices, ok := list.(*discoveryv1.EndpointSliceList); ok && c.Slices != nil {
		return c.listSlices(ctx, slices, lo)
	}
	out, ok := list.(*corev1.PodList)
	if !ok {
		return c.Client.List(ctx, list, opts...)
	}
	scope, sel, err := podScope(lo)
	if err != nil {
		return err
	}
	pods, err := c.Pods.List(ctx, scope)
	if err != nil {
		return err
	}
	out.Items = out.Items[:0]
	for _, p := range pods {
		if (lo.Namespace == "" || p.Namespace == lo.Namespace) && sel.Matches(labels.Set(p.Labels)) &&
			(lo.FieldSelector == nil || lo.FieldSelector.Matches(podFields(p))) {
			out.Items = append(out.Items, *p.DeepCopy())
		}
	}
	return nil
}

// listSlices lists a namespace's EndpointSlices, those that list a pod
// when the options say so (index.EndpointPod).
func (c PodClient) listSlices(ctx context.Context, out *discoveryv1.EndpointSliceList, lo *client.ListOptions) error {
	var pod string
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() {
		uid, ok := lo.FieldSelector.RequiresExactMatch(index.EndpointPod)
		if !ok {
			return fmt.Errorf("EndpointSlices are cached by namespace: this list's fields (%v) are not %s", lo.FieldSelector, index.EndpointPod)
		}
		pod = uid
	}
	if lo.Namespace == "" {
		return errors.New("EndpointSlices are cached by namespace (internal/controller/scoped): this list names none")
	}
	sel := lo.LabelSelector
	if sel == nil {
		sel = labels.Everything()
	}
	all, err := c.Slices.List(ctx, scoped.Scope{Namespace: lo.Namespace})
	if err != nil {
		return err
	}
	out.Items = out.Items[:0]
	for _, es := range all {
		if sel.Matches(labels.Set(es.Labels)) && (pod == "" || slices.Contains(index.EndpointPodsOf(es), pod)) {
			out.Items = append(out.Items, *es.DeepCopy())
		}
	}
	return nil
}

// podScope is the scope of a list of pods, and the labels its pods must
// match.
func podScope(lo *client.ListOptions) (scoped.Scope, labels.Selector, error) {
	sel := lo.LabelSelector
	if sel == nil {
		sel = labels.Everything()
	}
	if lo.FieldSelector != nil {
		if node, ok := lo.FieldSelector.RequiresExactMatch(index.PodNodeName); ok {
			return scoped.Node(node), sel, nil
		}
		if drain, ok := lo.FieldSelector.RequiresExactMatch(index.Surge); ok {
			req, err := labels.NewRequirement(surge.LabelDrain, selection.Equals, []string{drain})
			if err != nil {
				return scoped.Scope{}, nil, err
			}
			return scoped.Labelled(surge.LabelOf), sel.Add(*req), nil
		}
	}
	if reqs, _ := sel.Requirements(); lo.FieldSelector == nil {
		for _, r := range reqs {
			if r.Key() == surge.LabelOf && r.Operator() == selection.Exists {
				return scoped.Labelled(surge.LabelOf), sel, nil
			}
		}
	}
	return scoped.Scope{}, nil, fmt.Errorf("pods are cached by node (internal/controller/scoped): this list (fields %v, labels %v) names no node", lo.FieldSelector, sel)
}

// podFields are the fields a list of pods may select on: the cache's
// index names (index.PodNodeName, index.Surge).
func podFields(p *corev1.Pod) fields.Set {
	set := fields.Set{index.PodNodeName: p.Spec.NodeName}
	if keys := index.SurgeKeysOf(p); len(keys) == 1 {
		set[index.Surge] = keys[0]
	}
	return set
}

// keepScope says which scopes of the pod cache are still needed when
// nothing has read them for a while: a node's while its drain is in
// progress (not ended: queued, admitted, undoing), a pod's while an
// EvictionRequest names it (coordinating). A scope that cannot be judged
// (the cache failing) is kept.
func keepScope(c client.Reader, coordinating bool) func(scoped.Scope) bool {
	return func(s scoped.Scope) bool {
		ctx := context.Background()
		if node, ok := s.NodeOf(); ok {
			nd := &v1alpha1.NodeDrain{}
			// A drain is named after its node.
			switch err := c.Get(ctx, client.ObjectKey{Name: node}, nd); {
			case apierrors.IsNotFound(err):
				return false
			case err != nil:
				return true
			}
			return !nd.Ended()
		}
		if name, ok := podOf(s); ok && coordinating {
			list := &lifecyclev1alpha1.EvictionRequestList{}
			if err := c.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingFields{index.EvictionTarget: name}); err != nil {
				return true
			}
			return len(list.Items) > 0
		}
		return false
	}
}

// podOf says which pod a Pod scope is of.
func podOf(s scoped.Scope) (string, bool) {
	if s.Namespace == "" || s.Label != "" {
		return "", false
	}
	sel, err := fields.ParseSelector(s.Field)
	if err != nil {
		return "", false
	}
	return sel.RequiresExactMatch("metadata.name")
}
