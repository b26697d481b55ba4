package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/config/crd"
	"github.com/vacate-dev/vacate/config/rbac"
)

// manifestKinds are what 'vacate manifests' prints.
var manifestKinds = []string{"crds", "controller-role", "user-role"}

func newManifestsCommand(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "manifests crds|controller-role|user-role...",
		Short: "Print the manifests vacate needs in a cluster, for kubectl apply",
		Long: `Prints, as YAML for 'kubectl apply -f -', the manifests built into this vacate:
  crds             the NodeDrain and DrainPolicy CustomResourceDefinitions
  controller-role  the ClusterRole vacate-controller needs
  user-role        the ClusterRole vacate-user, for the people who run this CLI`,
		Example: `  # Install the CRDs
  vacate manifests crds | kubectl apply -f -

  # Let alice drain nodes with the CLI
  vacate manifests user-role | kubectl apply -f -
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
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				var b []byte
				var err error
				switch a {
				case "crds":
					b, err = crd.YAML()
				case "controller-role":
					b = rbac.ControllerRoleYAML
				case "user-role":
					b = rbac.UserRoleYAML
				}
				if err != nil {
					return err
				}
				if !strings.HasPrefix(string(b), "---") {
					fmt.Fprintln(s.Out, "---")
				}
				if _, err := s.Out.Write(b); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
