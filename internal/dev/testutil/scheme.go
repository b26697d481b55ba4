package testutil

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// Scheme knows Kubernetes' kinds and vacate's, for a fake client; it fails
// the test if it cannot be built.
func Scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s, err := evacuation.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
