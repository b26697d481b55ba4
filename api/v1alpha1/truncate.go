package v1alpha1

import "unicode/utf8"

// TruncateMark ends a text that was cut.
const TruncateMark = "…"

// Truncate cuts s to at most n runes (as the API server counts a
// maxLength), the last one TruncateMark when it cut: status messages and
// details stay within their bounds (MaxMessage) whatever the pods' names or
// the API server's messages.
func Truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	kept := 0
	for i := range s {
		if kept == n-1 {
			return s[:i] + TruncateMark
		}
		kept++
	}
	return s
}
