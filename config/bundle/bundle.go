// Package bundle assembles vacate's manifests into the documents one
// `kubectl apply -f` installs: what `vacate manifests install` prints and
// what a release publishes as install.yaml.
package bundle

import (
	"strings"

	"github.com/vacate-dev/vacate/config/admission"
	"github.com/vacate-dev/vacate/config/crd"
	"github.com/vacate-dev/vacate/config/manager"
	"github.com/vacate-dev/vacate/config/rbac"
)

// Install is everything a cluster needs to run vacate's controller with
// image, in order: the CRDs, the namespace (once, first of the namespaced
// objects, so that the Role in it applies), the RBAC, the admission
// policies, and the controller with its webhook; with forceDelete, the
// binding that lets it delete pods (DrainPolicies with
// timeouts.onTimeout: ForceDelete). The ClusterRole vacate-controller-surge
// is shipped, not bound (manager.SurgeYAML binds it). An image that is not
// an image reference is an error.
func Install(image string, forceDelete bool) ([]string, error) {
	crds, err := crd.YAML()
	if err != nil {
		return nil, err
	}
	workload, err := manager.WorkloadYAML(image)
	if err != nil {
		return nil, err
	}
	all := []string{string(crds), manager.NamespaceYAML, string(rbac.ControllerRoleYAML), string(rbac.ForceDeleteRoleYAML),
		string(rbac.SurgeRoleYAML), string(rbac.UserRoleYAML), admission.YAML(), workload}
	if forceDelete {
		all = append(all, manager.ForceDeleteYAML)
	}
	return all, nil
}

// Join makes one YAML stream of documents: each starts with "---" and ends
// with a newline.
func Join(parts []string) string {
	var b strings.Builder
	for _, p := range parts {
		if !strings.HasPrefix(p, "---") {
			b.WriteString("---\n")
		}
		b.WriteString(p)
		if !strings.HasSuffix(p, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}
