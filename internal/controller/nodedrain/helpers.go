package nodedrain

import (
	"strings"

	"k8s.io/klog/v2"
)

// klogRef references a cluster-scoped object, or namespace/name, in logs.
func klogRef(key string) klog.ObjectRef {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		return klog.KRef(ns, name)
	}
	return klog.KRef("", key)
}
