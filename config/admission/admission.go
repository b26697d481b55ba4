// Package admission embeds vacate's ValidatingAdmissionPolicies: they limit
// what RBAC cannot, field by field. nodes.yaml: vacate-controller changes on
// Nodes only the cordon and what is vacate's own. pods.yaml: in a Pod's
// status, only its own condition vacate.dev/serving. users.yaml: people name a
// DrainPolicy only with the verb use on it, change only their own
// requesters, and set only spec.release on an Evacuation, as themselves.
package admission

import (
	_ "embed"
)

// NodesYAML is the policy vacate-controller-nodes and its binding.
//
//go:embed nodes.yaml
var NodesYAML string

// PodsYAML is the policy vacate-controller-pods and its binding.
//
//go:embed pods.yaml
var PodsYAML string

// UsersYAML is the policies vacate-nodedrains and vacate-evacuations and
// their bindings.
//
//go:embed users.yaml
var UsersYAML string

// YAML is every policy and binding, for `vacate manifests admission`.
func YAML() string { return NodesYAML + "---\n" + PodsYAML + "---\n" + UsersYAML }
