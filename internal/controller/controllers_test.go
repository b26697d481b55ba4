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
// coordinates and requests exactly where discovery says the API is served;
// coordinate and request-only refuse to start elsewhere, saying what to
// enable; request-only requests without coordinating; off never asks
// discovery; a failure to ask is an error, never a silent no; and a mode
// that is none of these is refused, naming the four.
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
		request    bool
		state      string
		wantErr    string
		asked      bool
	}{
		{name: "auto, served", mode: EvictionRequestsAuto, resources: served, coordinate: true, request: true, state: "coordinating", asked: true},
		{name: "the default is auto", resources: served, coordinate: true, request: true, state: "coordinating", asked: true},
		{name: "auto, not served", mode: EvictionRequestsAuto, resources: plain, state: "not-served", asked: true},
		{name: "coordinate, served", mode: EvictionRequestsCoordinate, resources: served, coordinate: true, request: true, state: "coordinating", asked: true},
		{name: "coordinate, not served", mode: EvictionRequestsCoordinate, resources: plain, asked: true,
			wantErr: "--eviction-requests coordinate: the API server does not serve lifecycle.k8s.io/v1alpha1 (enable the feature gate EvictionRequestAPI"},
		{name: "request-only, served", mode: EvictionRequestsRequestOnly, resources: served, request: true, state: "requesting", asked: true},
		{name: "request-only, not served", mode: EvictionRequestsRequestOnly, resources: plain, asked: true,
			wantErr: "--eviction-requests request-only: the API server does not serve lifecycle.k8s.io/v1alpha1"},
		{name: "off", mode: EvictionRequestsOff, resources: served, state: "off"},
		{name: "discovery fails", mode: EvictionRequestsAuto, fail: errors.New("connection refused"), asked: true,
			wantErr: "--eviction-requests auto: discovering lifecycle.k8s.io/v1alpha1: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
			if tc.fail != nil {
				d.AddReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.fail })
			}
			roles, err := DecideRoles(tc.mode, d)
			if roles.State != tc.state {
				t.Errorf("the Lease's label %q, want %q", roles.State, tc.state)
			}
			if roles.Coordinate != tc.coordinate || roles.Request != tc.request {
				t.Errorf("coordinates, requests = %v, %v, want %v, %v", roles.Coordinate, roles.Request, tc.coordinate, tc.request)
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
	for _, s := range []string{"auto", "coordinate", "request-only", "off"} {
		if m, err := ParseEvictionRequestsMode(s); err != nil || string(m) != s {
			t.Errorf("ParseEvictionRequestsMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseEvictionRequestsMode("on"); err == nil || !strings.Contains(err.Error(), "want auto, coordinate, request-only or off") {
		t.Errorf("a mode that is none of the four: %v", err)
	}
}
