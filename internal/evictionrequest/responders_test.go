package evictionrequest

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	"k8s.io/utils/ptr"
)

func names(rs []lifecyclev1alpha1.TargetResponder) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// The order is the one the API server's validation enforces
// (k8s.io/kubernetes v1.37.2 pkg/apis/lifecycle/validation
// SortTargetResponders): a coordinator that activates in another order has
// its status write refused.
func TestOrderIsTheAPIServers(t *testing.T) {
	r := func(name string, priority *int32) lifecyclev1alpha1.TargetResponder {
		return lifecyclev1alpha1.TargetResponder{Name: name, Priority: priority}
	}
	for _, tc := range []struct {
		name string
		in   []lifecyclev1alpha1.TargetResponder
		want []string
	}{
		{"higher priority first", []lifecyclev1alpha1.TargetResponder{r("a.io/x", ptr.To[int32](1000)), r("b.io/x", ptr.To[int32](20000))}, []string{"b.io/x", "a.io/x"}},
		{"no priority last", []lifecyclev1alpha1.TargetResponder{r("a.io/x", nil), r("b.io/x", ptr.To[int32](1000))}, []string{"b.io/x", "a.io/x"}},
		{"top-level domain first", []lifecyclev1alpha1.TargetResponder{r("a.org/x", ptr.To[int32](1000)), r("z.com/x", ptr.To[int32](1000))}, []string{"z.com/x", "a.org/x"}},
		{"then the next label", []lifecyclev1alpha1.TargetResponder{r("b.example.com/x", ptr.To[int32](1000)), r("a.example.com/x", ptr.To[int32](1000))}, []string{"a.example.com/x", "b.example.com/x"}},
		{"a parent domain before its subdomain", []lifecyclev1alpha1.TargetResponder{r("a.example.com/x", ptr.To[int32](1000)), r("example.com/x", ptr.To[int32](1000))}, []string{"example.com/x", "a.example.com/x"}},
		{"then the key", []lifecyclev1alpha1.TargetResponder{r("example.com/b", ptr.To[int32](1000)), r("example.com/a", ptr.To[int32](1000))}, []string{"example.com/a", "example.com/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Order(tc.in)
			if got := names(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTargetRespondersEndWithTheEvictor(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{EvictionResponders: []corev1.EvictionResponder{
		{Name: "vacate.dev/hook", Priority: ptr.To[int32](5000)},
		{Name: "example.com/operator", Priority: ptr.To[int32](10000)},
	}}}
	got := TargetResponders(pod)
	if want := []string{"example.com/operator", "vacate.dev/hook", Evictor}; !slices.Equal(names(got), want) {
		t.Fatalf("responders %v, want %v", names(got), want)
	}
	for _, r := range got {
		if r.State != lifecyclev1alpha1.ResponderStateInactive {
			t.Errorf("%s starts %s, want Inactive", r.Name, r.State)
		}
	}
	if p := *got[2].Priority; p != 100 {
		t.Errorf("the evictor has priority %d; the API server accepts only 100", p)
	}
	if plain := TargetResponders(&corev1.Pod{}); !slices.Equal(names(plain), []string{Evictor}) {
		t.Errorf("a pod without responders: %v, want the evictor alone", names(plain))
	}
}
