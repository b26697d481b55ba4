// Package manager embeds the manifests that run vacate-controller in a
// cluster (controller.yaml: namespace, service account, binding,
// Deployment, PDB), with the image left for the installer to set.
package manager

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed controller.yaml
var controllerYAML string

// imageLine is the placeholder image in controller.yaml.
var imageLine = regexp.MustCompile(`(?m)^(\s+image: )IMAGE$`)

// validImage is a loose check of an image reference: no spaces, quotes or
// YAML syntax that could change the document.
var validImage = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:@-]*$`)

// ControllerYAML returns the manifests with the controller's image set.
func ControllerYAML(image string) (string, error) {
	if !validImage.MatchString(strings.ToLower(image)) {
		return "", fmt.Errorf("image %q is not an image reference such as ghcr.io/acme/vacate-controller:v0.1.0", image)
	}
	if n := len(imageLine.FindAllStringIndex(controllerYAML, -1)); n != 1 {
		return "", fmt.Errorf("controller.yaml has %d image placeholders, want 1", n)
	}
	return imageLine.ReplaceAllString(controllerYAML, "${1}"+image), nil
}
