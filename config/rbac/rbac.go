// Package rbac embeds vacate-controller's generated ClusterRole (role.yaml,
// written by `make generate` from the controllers' RBAC markers).
package rbac

import (
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

//go:embed role.yaml
var roleYAML []byte

// ControllerRole returns the ClusterRole vacate-controller needs.
func ControllerRole() (*rbacv1.ClusterRole, error) {
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(roleYAML, role); err != nil {
		return nil, fmt.Errorf("decoding the controller's ClusterRole: %w", err)
	}
	return role, nil
}
