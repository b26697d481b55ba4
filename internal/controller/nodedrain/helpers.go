package nodedrain

import (
	"fmt"
	"strings"

	"k8s.io/klog/v2"

	"github.com/vacate-dev/vacate/api/v1alpha1"
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
func truncate(s string, n int) string { return v1alpha1.Truncate(s, n) }

// listSome names at most n items, then how many more.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
