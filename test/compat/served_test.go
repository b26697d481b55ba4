//go:build compat

package compat

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/vacate-dev/vacate/config/rbac"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// TestControlPlaneIsTheSelectedVersion: the suite runs on the Kubernetes
// version $VACATE_K8S_VERSION asks for, not silently on the default one.
func TestControlPlaneIsTheSelectedVersion(t *testing.T) {
	cp, err := devcluster.SelectedControlPlane()
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.Start(t)
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the dev cluster runs Kubernetes %s (%s), etcd %s", v.GitVersion, v.GoVersion, cp.Etcd)
	if v.GitVersion != cp.Kubernetes || c.Kubernetes != cp.Kubernetes {
		t.Errorf("the API server is %s (state says %s), want %s ($%s=%q)", v.GitVersion, c.Kubernetes, cp.Kubernetes,
			devcluster.EnvKubernetesVersion, os.Getenv(devcluster.EnvKubernetesVersion))
	}
}

// optional are the resources vacate uses only when the cluster serves them:
// Kubernetes 1.37's EvictionRequest API (alpha, off by default).
var optional = []string{"lifecycle.k8s.io"}

// TestServedResourcesCoverTheControllerRole: every resource the
// controller's ClusterRole grants (what it calls) is served by this
// Kubernetes, but vacate's own (its CRDs) and the optional ones.
func TestServedResourcesCoverTheControllerRole(t *testing.T) {
	c := testenv.Start(t)
	role, err := rbac.ControllerRole()
	if err != nil {
		t.Fatal(err)
	}
	served := servedResources(t, c.Client.Discovery())
	checked := 0
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			if g == "vacate.dev" || slices.Contains(optional, g) {
				continue
			}
			for _, res := range r.Resources {
				checked++
				if !served[g+"/"+res] {
					t.Errorf("the controller's ClusterRole grants %v on %s in group %q, which Kubernetes %s does not serve", r.Verbs, res, g, c.Kubernetes)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d resources checked: the ClusterRole was not read", checked)
	}
}

// TestServedKindsCoverTheManifests: every kind of Kubernetes' own that
// config/ installs (ValidatingAdmissionPolicy at admissionregistration.k8s.io/v1,
// PodDisruptionBudget at policy/v1, ...) is served at that very version.
func TestServedKindsCoverTheManifests(t *testing.T) {
	c := testenv.Start(t)
	kinds := map[schema.GroupVersionKind][]string{}
	err := filepath.WalkDir("../../config", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		if filepath.Base(filepath.Dir(p)) == "plugin" {
			return nil // krew's manifest, a template
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, o := range testenv.Objects(t, string(b)) {
			gvk := o.GroupVersionKind()
			if gvk.Kind != "" && builtIn(gvk.Group) {
				kinds[gvk] = append(kinds[gvk], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(kinds) < 5 {
		t.Fatalf("only %d kinds found in config/", len(kinds))
	}
	for gvk, files := range kinds {
		list, err := c.Client.Discovery().ServerResourcesForGroupVersion(gvk.GroupVersion().String())
		found := err == nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == gvk.Kind })
		if !found {
			t.Errorf("%s (in %s) is not served by Kubernetes %s: %v", gvk, files[0], c.Kubernetes, err)
		}
	}
}

// builtIn reports whether group is Kubernetes' own, not vacate's or an
// add-on's (cert-manager, the Prometheus operator) or a kustomization's.
func builtIn(group string) bool {
	return group == "" || strings.HasSuffix(group, ".k8s.io") && !strings.HasPrefix(group, "kustomize.") ||
		slices.Contains([]string{"apps", "policy", "batch"}, group)
}

// servedResources is every "group/resource" (subresources as
// "resource/sub") the server serves, at any version.
func servedResources(t *testing.T, d discovery.DiscoveryInterface) map[string]bool {
	t.Helper()
	_, lists, err := d.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			out[gv.Group+"/"+r.Name] = true
		}
	}
	return out
}
