package nodedrain

import (
	"errors"

	"k8s.io/klog/v2"
)

func asPolicyNotFound(err error, target **policyNotFoundError) bool {
	return err != nil && errors.As(err, target)
}

// klogRef references a cluster-scoped object, or namespace/name, in logs.
func klogRef(key string) klog.ObjectRef {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return klog.KRef(key[:i], key[i+1:])
		}
	}
	return klog.KRef("", key)
}
