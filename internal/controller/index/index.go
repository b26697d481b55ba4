// Package index holds the cache indexes the controllers list by.
package index

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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
