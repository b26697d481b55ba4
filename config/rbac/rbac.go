// Package rbac embeds vacate's RBAC: vacate-controller's ClusterRole and its
// Role for the leader Lease (role.yaml, written by `make generate` from the
// controllers' RBAC markers), the ClusterRoles vacate-controller-force-delete
// (force-delete-role.yaml: pod delete, bound only where a policy forces) and
// vacate-controller-surge (surge-role.yaml: pod create and patch, bound only
// where a policy surges) and vacate-user's (user-role.yaml, hand-written:
// what the CLI needs).
package rbac

import (
	"bytes"
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// ControllerRoleYAML holds vacate-controller's ClusterRole and its Role in
// the namespace vacate-system (the leader Lease, by name).
//
//go:embed role.yaml
var ControllerRoleYAML []byte

// ForceDeleteRoleYAML is the ClusterRole vacate-controller-force-delete.
//
//go:embed force-delete-role.yaml
var ForceDeleteRoleYAML []byte

// SurgeRoleYAML is the ClusterRole vacate-controller-surge.
//
//go:embed surge-role.yaml
var SurgeRoleYAML []byte

// MetricsAuthRoleYAML holds the ClusterRoles of --metrics-secure:
// vacate-controller-metrics-auth (the controller's token and access
// reviews) and vacate-metrics-reader (for Prometheus).
//
//go:embed metrics-auth-role.yaml
var MetricsAuthRoleYAML []byte

// UserRoleYAML is the ClusterRole vacate-user, for the people who use the CLI.
//
//go:embed user-role.yaml
var UserRoleYAML []byte

// Names of vacate's roles and of what the Role vacate-controller grants.
const (
	ControllerRoleName  = "vacate-controller"
	ForceDeleteRoleName = "vacate-controller-force-delete"
	SurgeRoleName       = "vacate-controller-surge"
	UserRoleName        = "vacate-user"
	// MetricsAuthRoleName and MetricsReaderRoleName are the ClusterRoles of
	// --metrics-secure.
	MetricsAuthRoleName   = "vacate-controller-metrics-auth"
	MetricsReaderRoleName = "vacate-metrics-reader"
	// Namespace is where the controller runs and holds its leader Lease.
	Namespace = "vacate-system"
	// LeaseName is the leader Lease the Role vacate-controller names.
	LeaseName = "vacate-controller"
)

// MetricsAuthRoles returns the ClusterRoles of --metrics-secure: the
// controller's (reviews) and the metrics' readers'.
func MetricsAuthRoles() (auth, reader *rbacv1.ClusterRole, err error) {
	docs := bytes.Split(MetricsAuthRoleYAML, []byte("\n---\n"))
	if len(docs) != 2 {
		return nil, nil, fmt.Errorf("metrics-auth-role.yaml holds %d documents, want 2", len(docs))
	}
	auth, reader = &rbacv1.ClusterRole{}, &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(docs[0], auth); err != nil {
		return nil, nil, err
	}
	if err := yaml.UnmarshalStrict(docs[1], reader); err != nil {
		return nil, nil, err
	}
	return auth, reader, nil
}

// ControllerRole returns the ClusterRole vacate-controller needs.
func ControllerRole() (*rbacv1.ClusterRole, error) {
	role := &rbacv1.ClusterRole{}
	if err := decodeDoc(ControllerRoleYAML, "ClusterRole", role); err != nil {
		return nil, fmt.Errorf("decoding the ClusterRole %s: %w", ControllerRoleName, err)
	}
	return role, nil
}

// LeaderElectionRole returns the Role vacate-controller, for its leader
// Lease, moved to namespace and naming the Lease lease instead of
// vacate-controller: tests run controllers with other Lease names.
func LeaderElectionRole(namespace, lease string) (*rbacv1.Role, error) {
	role := &rbacv1.Role{}
	if err := decodeDoc(ControllerRoleYAML, "Role", role); err != nil {
		return nil, fmt.Errorf("decoding the Role %s: %w", ControllerRoleName, err)
	}
	role.Namespace = namespace
	for i := range role.Rules {
		for j, name := range role.Rules[i].ResourceNames {
			if name == LeaseName {
				role.Rules[i].ResourceNames[j] = lease
			}
		}
	}
	return role, nil
}

// ForceDeleteRole returns the ClusterRole vacate-controller-force-delete.
func ForceDeleteRole() (*rbacv1.ClusterRole, error) {
	return decode(ForceDeleteRoleYAML, ForceDeleteRoleName)
}

// SurgeRole returns the ClusterRole vacate-controller-surge.
func SurgeRole() (*rbacv1.ClusterRole, error) { return decode(SurgeRoleYAML, SurgeRoleName) }

// UserRole returns the ClusterRole vacate-user.
func UserRole() (*rbacv1.ClusterRole, error) { return decode(UserRoleYAML, UserRoleName) }

func decode(b []byte, name string) (*rbacv1.ClusterRole, error) {
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, role); err != nil {
		return nil, fmt.Errorf("decoding the ClusterRole %s: %w", name, err)
	}
	return role, nil
}

// decodeDoc decodes the document of kind from a multi-document YAML stream.
func decodeDoc(stream []byte, kind string, into any) error {
	for _, doc := range bytes.Split(stream, []byte("\n---\n")) {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return err
		}
		if head.Kind == kind {
			return yaml.UnmarshalStrict(doc, into)
		}
	}
	return fmt.Errorf("no %s in the stream", kind)
}
