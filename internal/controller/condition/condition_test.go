package condition

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func TestSetCapsTheMessage(t *testing.T) {
	var conds []metav1.Condition
	Set(&conds, metav1.Condition{Type: "Blocked", Status: metav1.ConditionTrue, Reason: "R", Message: strings.Repeat("é", 5000)})
	msg := conds[0].Message
	if n := utf8.RuneCountInString(msg); n != v1alpha1.MaxMessage || !strings.HasSuffix(msg, v1alpha1.TruncateMark) {
		t.Errorf("message of %d runes ending %q, want %d ending %q", n, msg[len(msg)-6:], v1alpha1.MaxMessage, v1alpha1.TruncateMark)
	}
}
