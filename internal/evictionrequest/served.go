package evictionrequest

import (
	"errors"
	"fmt"
	"slices"

	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
)

// GroupVersion is the EvictionRequest API's group and version.
var GroupVersion = lifecyclev1alpha1.SchemeGroupVersion

// resources are what a coordinator reads and writes: EvictionRequests and
// Evictions, with the status of each.
var resources = []string{"evictionrequests", "evictionrequests/status", "evictions", "evictions/status"}

// Served says whether the API server serves the EvictionRequest API: every
// resource of the group version a coordinator needs. A group version that is
// not served is a plain no. One served without one of those resources
// (another revision of the alpha) is an error naming what is missing, and so
// is any failure to ask discovery: never a silent no.
func Served(d discovery.ServerResourcesInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(GroupVersion.String())
	// A cached discovery client says so with an error of its own.
	if apierrors.IsNotFound(err) || errors.Is(err, memory.ErrCacheNotFound) || (err == nil && list == nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", GroupVersion, err)
	}
	served := make([]string, 0, len(list.APIResources))
	for _, r := range list.APIResources {
		served = append(served, r.Name)
	}
	for _, r := range resources {
		if !slices.Contains(served, r) {
			return false, fmt.Errorf("%s is served without %s (it serves %v): not the API vacate knows", GroupVersion, r, served)
		}
	}
	return true, nil
}
