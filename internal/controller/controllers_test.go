package controller

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	discoveryfake "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestTheModeDecidesWhetherVacateCoordinates: --eviction-requests. auto
// coordinates exactly where discovery says the API is served; coordinate
// refuses to start elsewhere, saying what to enable; off never asks
// discovery; a failure to ask is an error, never a silent no; and a mode
// that is none of these is refused, naming the three.
func TestTheModeDecidesWhetherVacateCoordinates(t *testing.T) {
	served := []*metav1.APIResourceList{{GroupVersion: "v1"}, {GroupVersion: "lifecycle.k8s.io/v1alpha1", APIResources: []metav1.APIResource{
		{Name: "evictionrequests"}, {Name: "evictionrequests/status"}, {Name: "evictions"}, {Name: "evictions/status"}}}}
	plain := []*metav1.APIResourceList{{GroupVersion: "v1"}}
	for _, tc := range []struct {
		name       string
		mode       EvictionRequestsMode
		resources  []*metav1.APIResourceList
		fail       error
		coordinate bool
		wantErr    string
		asked      bool
	}{
		{name: "auto, served", mode: EvictionRequestsAuto, resources: served, coordinate: true, asked: true},
		{name: "the default is auto", resources: served, coordinate: true, asked: true},
		{name: "auto, not served", mode: EvictionRequestsAuto, resources: plain, asked: true},
		{name: "coordinate, served", mode: EvictionRequestsCoordinate, resources: served, coordinate: true, asked: true},
		{name: "coordinate, not served", mode: EvictionRequestsCoordinate, resources: plain, asked: true,
			wantErr: "does not serve lifecycle.k8s.io/v1alpha1 (enable the feature gate EvictionRequestAPI"},
		{name: "off", mode: EvictionRequestsOff, resources: served},
		{name: "discovery fails", mode: EvictionRequestsAuto, fail: errors.New("connection refused"), asked: true,
			wantErr: "--eviction-requests auto: discovering lifecycle.k8s.io/v1alpha1: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
			if tc.fail != nil {
				d.AddReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.fail })
			}
			coordinate, state, err := Coordinates(tc.mode, d)
			if want := map[bool]string{true: "coordinating", false: map[bool]string{true: "off", false: "not-served"}[tc.mode == EvictionRequestsOff]}[coordinate]; err == nil && state != want {
				t.Errorf("the Lease's label %q, want %q", state, want)
			}
			if coordinate != tc.coordinate {
				t.Errorf("coordinates = %v, want %v", coordinate, tc.coordinate)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
			if asked := len(d.Actions()) > 0; asked != tc.asked {
				t.Errorf("asked discovery: %v, want %v", asked, tc.asked)
			}
		})
	}
	for _, s := range []string{"auto", "coordinate", "off"} {
		if m, err := ParseEvictionRequestsMode(s); err != nil || string(m) != s {
			t.Errorf("ParseEvictionRequestsMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseEvictionRequestsMode("on"); err == nil || !strings.Contains(err.Error(), "want auto, coordinate or off") {
		t.Errorf("a mode that is none of the three: %v", err)
	}
}
