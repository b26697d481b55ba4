package providers

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func provider(name string, modes ...v1alpha1.DrainMode) *v1alpha1.EvacuationProvider {
	return &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.EvacuationProviderSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Modes: modes}}
}

// TestAsks: who is asked for an Evacuation, by mode, protected pods,
// deletion and an earlier request of the same drain.
func TestAsks(t *testing.T) {
	both := provider("both")
	maint := provider("maint", v1alpha1.ModeMaintenance)
	deleting := provider("deleting")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	m, d := v1alpha1.ModeMaintenance, v1alpha1.ModeDecommission
	for _, tc := range []struct {
		name     string
		p        *v1alpha1.EvacuationProvider
		mode     v1alpha1.DrainMode
		protects int
		asked    bool
		want     bool
	}{
		{"protects a leaving pod", both, m, 1, false, true},
		{"protects nothing in Maintenance", both, m, 0, false, false},
		{"protects nothing, asked already", both, m, 0, true, true},
		{"protects nothing in Decommission", both, d, 0, false, true},
		{"takes no part in Decommission", maint, d, 3, false, false},
		{"being deleted", deleting, m, 3, true, false},
	} {
		if got := Asks(tc.p, tc.mode, tc.protects, tc.asked); got != tc.want {
			t.Errorf("%s: Asks = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestSelects: both selectors; the namespace's labels are read only for a
// namespaceSelector, a gone namespace has none, a read error is an error.
func TestSelects(t *testing.T) {
	reads := 0
	labelsOf := func(ns string) (labels.Set, error) {
		reads++
		if ns == "broken" {
			return nil, errors.New("cache down")
		}
		return map[string]labels.Set{"storage": {"storage": "yes"}}[ns], nil
	}
	pod := func(ns, app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app, Labels: map[string]string{"app": app}}}
	}
	p := provider("p")
	if ok, err := Selects(p, pod("any", "db"), labelsOf); !ok || err != nil || reads != 0 {
		t.Errorf("podSelector alone: %t, %v, %d read(s); want true, no read", ok, err, reads)
	}
	p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"storage": "yes"}}
	got, err := Protected(p, []*corev1.Pod{pod("storage", "db"), pod("storage", "web"), pod("other", "db"), pod("gone", "db")}, labelsOf)
	if err != nil || len(got) != 1 || got[0].Namespace != "storage" || got[0].Name != "db" {
		t.Errorf("Protected = %v, %v; want only storage/db", got, err)
	}
	if _, err := Selects(p, pod("broken", "db"), labelsOf); err == nil {
		t.Error("a namespace that cannot be read is not an error")
	}
}
