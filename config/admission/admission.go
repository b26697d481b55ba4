// Package admission embeds vacate's ValidatingAdmissionPolicies: they limit
// what RBAC cannot, field by field. nodes.yaml: vacate-controller changes on
// Nodes only the cordon and what is vacate's own. tokens.yaml: its own
// tokens only for one pod's HTTP hook, ten minutes long. pods.yaml: through
// pods/status, only its own condition vacate.dev/serving. webhook.yaml: in
// its MutatingWebhookConfiguration, only the webhooks' CA bundle;
// nodedrain-webhook.yaml: the same in its ValidatingWebhookConfiguration.
// users.yaml: people name, change or clear a DrainPolicy only with the verb
// use on it, change only their own requesters, set a deadline only with the
// verb force, an override only with its verb, Decommission only with the
// verb decommission, never add finalizers or owner references nor remove
// vacate's finalizers, and set only spec.release on an Evacuation, as
// themselves.
// evacuation-status.yaml: only a provider's reporter writes its Evacuations'
// status. eviction-requests.yaml: only someone who may evict a pod asks for
// its eviction with an EvictionRequest.
package admission

import (
	_ "embed"
)

// NodesYAML is the policy vacate-controller-nodes and its binding.
//
//go:embed nodes.yaml
var NodesYAML string

// PodsYAML is the policies vacate-controller-pods, vacate-controller-surge
// (the controller creates and changes only true surge replacements) and
// vacate-surge-replacements (no one else makes one), and their bindings.
//
//go:embed pods.yaml
var PodsYAML string

// WebhookYAML is the policy vacate-controller-webhook and its binding.
//
//go:embed webhook.yaml
var WebhookYAML string

// NodeDrainWebhookYAML is the policy vacate-controller-nodedrain-webhook and
// its binding: in the NodeDrain policy webhook's configuration, only the CA
// bundle.
//
//go:embed nodedrain-webhook.yaml
var NodeDrainWebhookYAML string

// EvacuationStatusYAML is the policy vacate-evacuation-status and its
// binding: only a provider's reporter writes its Evacuations' status.
//
//go:embed evacuation-status.yaml
var EvacuationStatusYAML string

// EvictionRequestsYAML is the policy vacate-eviction-requests and its
// binding: an EvictionRequest that asks for a pod's eviction only from
// someone who may evict that pod.
//
//go:embed eviction-requests.yaml
var EvictionRequestsYAML string

// TokensYAML is the policy vacate-controller-tokens and its binding: the
// controller's own service-account tokens only for one pod's HTTP hook, ten
// minutes long.
//
//go:embed tokens.yaml
var TokensYAML string

// UsersYAML is the policies vacate-nodedrains and vacate-evacuations and
// their bindings.
//
//go:embed users.yaml
var UsersYAML string

// YAML is every policy and binding, for `vacate manifests admission`.
func YAML() string {
	return NodesYAML + "---\n" + PodsYAML + "---\n" + TokensYAML + "---\n" + WebhookYAML + "---\n" + NodeDrainWebhookYAML + "---\n" + UsersYAML + "---\n" + EvacuationStatusYAML + "---\n" + EvictionRequestsYAML
}
