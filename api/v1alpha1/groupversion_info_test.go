package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestAddToSchemeRegistersTheGroup(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if !s.IsVersionRegistered(GroupVersion) {
		t.Fatalf("%s is not registered", GroupVersion)
	}
	if GroupVersion.Group != "vacate.dev" || GroupVersion.Version != "v1alpha1" {
		t.Errorf("group version = %s, want vacate.dev/v1alpha1", GroupVersion)
	}
}
