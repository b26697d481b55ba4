// Package index holds the cache indexes the controllers list by.
package index

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// PodNodeName indexes cached pods by spec.nodeName.
const PodNodeName = "spec.nodeName"

// Register adds the indexes to the manager's cache.
func Register(ctx context.Context, mgr manager.Manager) error {
	return mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, PodNodeName, NodeNameOf)
}

// NodeNameOf is the PodNodeName index's value of a pod.
func NodeNameOf(o client.Object) []string {
	if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
		return []string{n}
	}
	return nil
}

// PodsOnNode lists the node's pods from the cache.
func PodsOnNode(ctx context.Context, c client.Reader, node string) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.MatchingFields{PodNodeName: node}); err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	return pods, nil
}

// NodesOfPDB are the nodes (sorted) of the pods the PodDisruptionBudget
// selects: same namespace, its selector matching (nil selects nothing, {}
// everything), read from the cache without copies.
func NodesOfPDB(ctx context.Context, c client.Reader, pdb *policyv1.PodDisruptionBudget) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(pdb.Namespace), client.MatchingLabelsSelector{Selector: sel},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the pods of PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
	}
	nodes := map[string]bool{}
	for i := range pods.Items {
		if n := pods.Items[i].Spec.NodeName; n != "" {
			nodes[n] = true
		}
	}
	return slices.Sorted(maps.Keys(nodes)), nil
}

// PDBs lists every PodDisruptionBudget from the cache.
func PDBs(ctx context.Context, c client.Reader) ([]*policyv1.PodDisruptionBudget, error) {
	list := &policyv1.PodDisruptionBudgetList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	out := make([]*policyv1.PodDisruptionBudget, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}
