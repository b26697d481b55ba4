package v1alpha1

import "testing"

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"héllo", 4, "hél…"},
		{"日本語の文", 5, "日本語の文"},
		{"日本語の文字", 5, "日本語の…"},
		{"ab", 1, "…"},
		{"a", 1, "a"},
	} {
		if got := Truncate(c.in, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
