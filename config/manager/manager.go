// Package manager embeds the manifests that run vacate-controller in a
// cluster: its namespace (namespace.yaml); its service account, role
// bindings, Deployment, PDB and Services (controller.yaml), with the image
// left for the installer to set; the configurations of its webhooks, the
// endpoint-aware one (webhook.yaml) and the NodeDrain policy one
// (nodedrain-webhook.yaml), written by `make generate` from
// internal/webhook; and the binding that grants pod delete, only for
// policies with onTimeout: ForceDelete (force-delete/force-delete.yaml, a
// kustomize component); and the binding that grants pod create and patch,
// only for policies that surge (surge/surge.yaml, a kustomize component).
package manager

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed controller.yaml
var controllerYAML string

// NamespaceYAML is the namespace vacate-system.
//
//go:embed namespace.yaml
var NamespaceYAML string

// ForceDeleteYAML is the ClusterRoleBinding vacate-controller-force-delete.
//
//go:embed force-delete/force-delete.yaml
var ForceDeleteYAML string

// SurgeYAML is the ClusterRoleBinding vacate-controller-surge.
//
//go:embed surge/surge.yaml
var SurgeYAML string

// webhookYAML is the MutatingWebhookConfiguration, as `make generate` wrote
// it (WebhookConfigurationYAML).
//
//go:embed webhook.yaml
var webhookYAML string

// nodeDrainWebhookYAML is the ValidatingWebhookConfiguration of the
// NodeDrain policy webhook, as `make generate` wrote it.
//
//go:embed nodedrain-webhook.yaml
var nodeDrainWebhookYAML string

// validImage is a loose check of an image reference: no spaces, quotes or
// YAML syntax that could change the document.
var validImage = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:@-]*$`)

// ControllerYAML returns the namespace and the controller's manifests, with
// the controller's image set.
func ControllerYAML(image string) (string, error) {
	y, err := WorkloadYAML(image)
	if err != nil {
		return "", err
	}
	return NamespaceYAML + "---\n" + y, nil
}

// WorkloadYAML returns the controller's manifests without the namespace,
// with the controller's image set.
func WorkloadYAML(image string) (string, error) {
	y, err := SetImage(controllerYAML, "vacate-controller", image)
	if err != nil {
		return "", err
	}
	return y + "---\n" + webhookYAML + "---\n" + nodeDrainWebhookYAML, nil
}

// Namespace is vacate-controller's namespace.
const Namespace = "vacate-system"

// SetImage replaces the one placeholder image of a manifest, a line
// "image: <binary>" (the name kustomize's images field matches), with image,
// after checking it is an image reference.
func SetImage(manifest, binary, image string) (string, error) {
	if !validImage.MatchString(strings.ToLower(image)) {
		return "", fmt.Errorf("image %q is not an image reference such as ghcr.io/acme/%s:v0.1.0", image, binary)
	}
	line := regexp.MustCompile(`(?m)^(\s+image: )` + regexp.QuoteMeta(binary) + `$`)
	if n := len(line.FindAllStringIndex(manifest, -1)); n != 1 {
		return "", fmt.Errorf("the %s manifest has %d image placeholders, want 1", binary, n)
	}
	return line.ReplaceAllString(manifest, "${1}"+image), nil
}
