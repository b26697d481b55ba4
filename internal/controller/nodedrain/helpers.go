package nodedrain

import (
	"strings"
	"unicode/utf8"

	"k8s.io/klog/v2"
)

// klogRef references a cluster-scoped object, or namespace/name, in logs.
func klogRef(key string) klog.ObjectRef {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		return klog.KRef(ns, name)
	}
	return klog.KRef("", key)
}

// maxDetail bounds a blocker's detail, as the CRD does.
const maxDetail = 2048

// truncate shortens s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
