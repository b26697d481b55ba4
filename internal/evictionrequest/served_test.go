package evictionrequest

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	discoveryfake "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// The real API server's answers (with and without the feature gate) are
// internal/dev/devcluster's TestEvictionRequestAPIOnlyWithTheGate; these are
// the answers a dev cluster does not give.
func TestServedNamesWhatIsMissing(t *testing.T) {
	list := func(names ...string) []*metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: GroupVersion.String()}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n})
		}
		return []*metav1.APIResourceList{{GroupVersion: "v1"}, l}
	}
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		fail      error
		served    bool
		wantErr   string
	}{
		{name: "served", resources: list("evictionrequests", "evictionrequests/status", "evictions", "evictions/status"), served: true},
		{name: "not served", resources: []*metav1.APIResourceList{{GroupVersion: "v1"}}},
		{name: "served without evictions", resources: list("evictionrequests", "evictionrequests/status"), wantErr: "served without evictions"},
		{name: "discovery fails", fail: errors.New("connection refused"), wantErr: "discovering lifecycle.k8s.io/v1alpha1: connection refused"},
		{name: "not in a cached client's discovery", fail: memory.ErrCacheNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
			if tc.fail != nil {
				d.AddReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.fail })
			}
			served, err := Served(d)
			if served != tc.served {
				t.Errorf("served %v, want %v", served, tc.served)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}
