package cli

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestControllerLeases: uninstall finds the controller's Lease from the
// Deployment's flags (either spelling, defaults as the controller's), and
// adds the one --lease-namespace/--lease-name give, once.
func TestControllerLeases(t *testing.T) {
	deploy := func(containers ...map[string]any) *unstructured.Unstructured {
		cs := make([]any, 0, len(containers))
		for _, c := range containers {
			cs = append(cs, c)
		}
		return &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": cs}}}}}
	}
	outside := types.NamespacedName{Namespace: "kube-system", Name: "vacate-controller"}
	for _, tc := range []struct {
		name    string
		deploy  *unstructured.Unstructured
		flagged types.NamespacedName
		want    []types.NamespacedName
	}{
		{"shipped manifests", must(installedDeploymentManifest()), outside,
			[]types.NamespacedName{{Namespace: "vacate-system", Name: "vacate-controller"}, outside}},
		{"renamed, both spellings", deploy(map[string]any{"args": []any{"--leader-election-id", "vacate-b", "--leader-election-namespace=ops"}}), outside,
			[]types.NamespacedName{{Namespace: "ops", Name: "vacate-b"}, outside}},
		{"in command, last wins", deploy(map[string]any{"command": []any{"/vacate-controller", "--leader-election-id=a"}, "args": []any{"--leader-election-id=b"}}), outside,
			[]types.NamespacedName{{Namespace: "kube-system", Name: "b"}, outside}},
		{"no flags: the controller's defaults, once", deploy(map[string]any{"args": []any{"--leader-elect"}}), outside,
			[]types.NamespacedName{outside}},
		{"flags name another", deploy(map[string]any{"args": []any{"--leader-election-namespace=vacate-system"}}), types.NamespacedName{Namespace: "dev", Name: "mine"},
			[]types.NamespacedName{{Namespace: "vacate-system", Name: "vacate-controller"}, {Namespace: "dev", Name: "mine"}}},
	} {
		if got := controllerLeases(tc.deploy, tc.flagged); !slices.Equal(got, tc.want) {
			t.Errorf("%s: leases %v, want %v", tc.name, got, tc.want)
		}
	}
}

// installedDeploymentManifest is the Deployment 'vacate manifests install'
// renders.
func installedDeploymentManifest() (*unstructured.Unstructured, error) {
	objs, err := installedObjects()
	if err != nil {
		return nil, err
	}
	for _, o := range objs.controller {
		if o.GetKind() == "Deployment" {
			return o, nil
		}
	}
	return nil, nil
}
