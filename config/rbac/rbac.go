// Package rbac embeds vacate's ClusterRoles: vacate-controller's (role.yaml,
// written by `make generate` from the controllers' RBAC markers) and
// vacate-user's (user-role.yaml, hand-written: what the CLI needs).
package rbac

import (
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// ControllerRoleYAML is vacate-controller's ClusterRole.
//
//go:embed role.yaml
var ControllerRoleYAML []byte

// UserRoleYAML is the ClusterRole vacate-user, for the people who use the CLI.
//
//go:embed user-role.yaml
var UserRoleYAML []byte

// ControllerRole returns the ClusterRole vacate-controller needs.
func ControllerRole() (*rbacv1.ClusterRole, error) {
	return decode(ControllerRoleYAML, "vacate-controller")
}

// UserRole returns the ClusterRole vacate-user.
func UserRole() (*rbacv1.ClusterRole, error) { return decode(UserRoleYAML, "vacate-user") }

func decode(b []byte, name string) (*rbacv1.ClusterRole, error) {
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, role); err != nil {
		return nil, fmt.Errorf("decoding the ClusterRole %s: %w", name, err)
	}
	return role, nil
}
