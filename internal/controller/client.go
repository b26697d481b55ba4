package controller

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// kubeClient is the clientset for calls controller-runtime's client does not
// make (the Eviction subresource). It shares the manager's HTTP client.
func kubeClient(mgr manager.Manager) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating clientset: %w", err)
	}
	return cs, nil
}
