package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
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

// TestUninstallFindsTheLeaseFromTheDeployment: the installed Deployment's
// controller elects its leader on a Lease renamed by its flags, held by a
// live replica, and another controller holds a Lease that --lease-namespace
// and --lease-name name: the dry run waits on both, by those names.
func TestUninstallFindsTheLeaseFromTheDeployment(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.DrainClient(t, c)
	ctx := testenv.Context(t)
	install(t, c, cl)
	patch := must(json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/spec/template/spec/containers/0/args/2", Value: "--leader-election-id=vacate-controller"},
		{Op: "replace", Path: "/spec/template/spec/containers/0/args/2", Value: "--leader-election-id=vacate-renamed"},
	}))
	if _, err := c.Client.AppsV1().Deployments("vacate-system").Patch(ctx, "vacate-controller", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("renaming the Deployment's Lease: %v", err)
	}
	holdLeaseAt(t, c, types.NamespacedName{Namespace: "vacate-system", Name: "vacate-renamed"}, "renamed-replica")
	holdLeaseAt(t, c, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "vacate-elsewhere"}, "elsewhere")
	u := newUser(t, c, "uninstaller-lease", "system:masters")

	out := u.must(ExitOK, "uninstall", "--cancel-drains", "--dry-run")
	if want := "controller: a vacate-controller holds Lease vacate-system/vacate-renamed (renamed-replica); uninstall would wait until it stops"; !strings.Contains(out, want) {
		t.Errorf("the dry run does not wait on the Deployment's Lease; want %q in:\n%s", want, out)
	}
	out = u.must(ExitOK, "uninstall", "--cancel-drains", "--dry-run", "--lease-namespace", metav1.NamespaceDefault, "--lease-name", "vacate-elsewhere")
	for _, want := range []string{
		"controller: a vacate-controller holds Lease vacate-system/vacate-renamed (renamed-replica)",
		"controller: a vacate-controller holds Lease default/vacate-elsewhere (elsewhere); uninstall would wait until it stops",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the dry run with --lease-namespace/--lease-name lacks %q:\n%s", want, out)
		}
	}
}

// holdLeaseAt makes holder the holder of the Lease key for an hour, until
// the test ends.
func holdLeaseAt(t *testing.T, c *devcluster.Cluster, key types.NamespacedName, holder string) {
	t.Helper()
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	leases := c.Client.CoordinationV1().Leases(key.Namespace)
	if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Lease %s: %v", key, err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), key.Name, metav1.DeleteOptions{}) })
}
