package condition

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

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

func TestSetCapsTheMessage(t *testing.T) {
	var conds []metav1.Condition
	Set(&conds, metav1.Condition{Type: "Blocked", Status: metav1.ConditionTrue, Reason: "R", Message: strings.Repeat("é", 5000)})
	msg := conds[0].Message
	if n := utf8.RuneCountInString(msg); n != v1alpha1.MaxMessage || !strings.HasSuffix(msg, Mark) {
		t.Errorf("message of %d runes ending %q, want %d ending %q", n, msg[len(msg)-6:], v1alpha1.MaxMessage, Mark)
	}
}
