package testutil

import (
	"fmt"
	"testing"

	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ResponderStates is an Eviction's responders in turn order with their
// states, "name=State " each, for tests to compare.
func ResponderStates(s lifecyclev1alpha1.EvictionStatus) string {
	out := ""
	for _, r := range s.TargetResponders {
		out += fmt.Sprintf("%s=%s ", r.Name, r.State)
	}
	return out
}

// WantResponderStates fails the test unless the responders' states are want
// (ResponderStates' form).
func WantResponderStates(t testing.TB, s lifecyclev1alpha1.EvictionStatus, want string) {
	t.Helper()
	if got := ResponderStates(s); got != want {
		t.Errorf("responders %q, want %q", got, want)
	}
}

// WantEvictionCondition fails the test unless the Eviction's condition typ
// is True for reason.
func WantEvictionCondition(t testing.TB, s lifecyclev1alpha1.EvictionStatus, typ lifecyclev1alpha1.EvictionConditionType, reason lifecyclev1alpha1.EvictionConditionReason) {
	t.Helper()
	c := meta.FindStatusCondition(s.Conditions, string(typ))
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(reason) {
		t.Errorf("condition %s = %+v, want True %s", typ, c, reason)
	}
}
