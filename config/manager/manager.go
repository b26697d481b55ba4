// Package manager embeds the manifests that run vacate-controller in a
// cluster: its namespace (namespace.yaml); its service account, role
// bindings, Deployment and PDB (controller.yaml), with the image left for
// the installer to set; and the binding that grants pod delete, only for
// policies with onTimeout: ForceDelete (force-delete.yaml).
package manager

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/vacate-dev/vacate/internal/webhook"
)

//go:embed controller.yaml
var controllerYAML string

// NamespaceYAML is the namespace vacate-system.
//
//go:embed namespace.yaml
var NamespaceYAML string

// ForceDeleteYAML is the ClusterRoleBinding vacate-controller-force-delete.
//
//go:embed force-delete.yaml
var ForceDeleteYAML string

// imageLine is the placeholder image in a manifest.
var imageLine = regexp.MustCompile(`(?m)^(\s+image: )IMAGE$`)

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
	wh, err := WebhookConfigurationYAML()
	if err != nil {
		return "", err
	}
	return y + "---\n" + wh, nil
}

// WebhookConfigurationYAML is the MutatingWebhookConfiguration of the
// endpoint-aware webhook, served by vacate-controller behind its Service;
// the controller injects the CA bundle.
func WebhookConfigurationYAML() (string, error) {
	path := webhook.Path
	cfg := webhook.Configuration(admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: Namespace, Name: webhook.ServiceName, Path: &path, Port: ptr.To[int32](443)}}, Namespace)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	return "# The endpoint-aware admission webhook (docs/endpoint-aware.md): fails open,\n# called only for pods that opted in.\n" + string(b), nil
}

// Namespace is vacate-controller's namespace.
const Namespace = "vacate-system"

// SetImage replaces the one placeholder image (a line "image: IMAGE") of a
// manifest with image, after checking it is an image reference; binary
// names the program, for the error.
func SetImage(manifest, binary, image string) (string, error) {
	if !validImage.MatchString(strings.ToLower(image)) {
		return "", fmt.Errorf("image %q is not an image reference such as ghcr.io/acme/%s:v0.1.0", image, binary)
	}
	if n := len(imageLine.FindAllStringIndex(manifest, -1)); n != 1 {
		return "", fmt.Errorf("the %s manifest has %d image placeholders, want 1", binary, n)
	}
	return imageLine.ReplaceAllString(manifest, "${1}"+image), nil
}
