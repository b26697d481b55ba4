package nodedrain

import (
	"strings"

	"k8s.io/klog/v2"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/controller/condition"
)

// klogRef references a cluster-scoped object, or namespace/name, in logs.
func klogRef(key string) klog.ObjectRef {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		return klog.KRef(ns, name)
	}
	return klog.KRef("", key)
}

// maxDetail bounds a blocker's detail and a hook's message (the CRD allows
// no more for a hook's).
const maxDetail = v1alpha1.MaxMessage

// maxHolder bounds a blocker's holder, as the CRD does.
const maxHolder = 512

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string { return condition.Truncate(s, n) }
