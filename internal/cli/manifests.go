package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/config/crd"
	"github.com/vacate-dev/vacate/config/manager"
	"github.com/vacate-dev/vacate/config/rbac"
)

// manifestKinds are what 'vacate manifests' prints.
var manifestKinds = []string{"install", "crds", "controller-role", "controller", "user-role"}

func newManifestsCommand(s Streams) *cobra.Command {
	var image string
	cmd := &cobra.Command{
		Use:   "manifests install|crds|controller-role|controller|user-role...",
		Short: "Print the manifests vacate needs in a cluster, for kubectl apply",
		Long: `Prints, as YAML for 'kubectl apply -f -', the manifests built into this vacate:
  install          everything below, in order: what a cluster needs to run vacate
  crds             the NodeDrain and DrainPolicy CustomResourceDefinitions
  controller-role  the ClusterRole vacate-controller needs
  controller       namespace vacate-system, service account, role binding, a
                   Deployment of vacate-controller (needs --image) and its PDB
  user-role        the ClusterRole vacate-user, for the people who run this CLI`,
		Example: `  # Install vacate in the current cluster
  vacate manifests install --image ghcr.io/acme/vacate-controller:v0.1.0 | kubectl apply -f -

  # Only the CRDs (to run the controller elsewhere, with --kubeconfig)
  vacate manifests crds | kubectl apply -f -

  # Let alice drain nodes with the CLI
  kubectl create clusterrolebinding alice-vacate --clusterrole vacate-user --user alice`,
		ValidArgs: manifestKinds,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return argsError{"name what to print: " + strings.Join(manifestKinds, ", ")}
			}
			for _, a := range args {
				if !slices.Contains(manifestKinds, a) {
					return argsError{fmt.Sprintf("unknown manifest %q: choose from %s", a, strings.Join(manifestKinds, ", "))}
				}
				if (a == "controller" || a == "install") && image == "" {
					return argsError{fmt.Sprintf("%q needs --image, the vacate-controller image to run", a)}
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var parts []string
			for _, a := range args {
				docs, err := manifest(a, image)
				if err != nil {
					return err
				}
				parts = append(parts, docs...)
			}
			for _, p := range parts {
				if !strings.HasPrefix(p, "---") {
					p = "---\n" + p
				}
				if !strings.HasSuffix(p, "\n") {
					p += "\n"
				}
				if _, err := fmt.Fprint(s.Out, p); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the vacate-controller image, for controller and install")
	return cmd
}

func manifest(kind, image string) ([]string, error) {
	switch kind {
	case "install":
		var all []string
		for _, k := range []string{"crds", "controller-role", "user-role", "controller"} {
			docs, err := manifest(k, image)
			if err != nil {
				return nil, err
			}
			all = append(all, docs...)
		}
		return all, nil
	case "crds":
		b, err := crd.YAML()
		return []string{string(b)}, err
	case "controller-role":
		return []string{string(rbac.ControllerRoleYAML)}, nil
	case "user-role":
		return []string{string(rbac.UserRoleYAML)}, nil
	case "controller":
		y, err := manager.ControllerYAML(image)
		if err != nil {
			return nil, usageError{err}
		}
		return []string{y}, nil
	}
	return nil, fmt.Errorf("unknown manifest %q", kind)
}
