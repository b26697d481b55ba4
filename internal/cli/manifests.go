package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vacate-dev/vacate/config/admission"
	"github.com/vacate-dev/vacate/config/agent"
	"github.com/vacate-dev/vacate/config/bundle"
	"github.com/vacate-dev/vacate/config/crd"
	"github.com/vacate-dev/vacate/config/manager"
	"github.com/vacate-dev/vacate/config/rbac"
)

// manifestKinds are what 'vacate manifests' prints.
var manifestKinds = []string{"install", "crds", "controller-role", "controller", "user-role", "admission", "force-delete", "surge", "agent", "agent-unit"}

// bindings are the optional ClusterRoleBindings 'manifests install' adds.
type bindings struct {
	// forceDelete binds vacate-controller-force-delete (pod delete).
	forceDelete bool
	// surge binds vacate-controller-surge (pod create and patch).
	surge bool
}

func newManifestsCommand(s Streams) *cobra.Command {
	var image, agentImage string
	var binds bindings
	cmd := &cobra.Command{
		Use:   "manifests install|crds|controller-role|controller|user-role|admission|force-delete|surge|agent|agent-unit...",
		Short: "Print the manifests vacate needs in a cluster, for kubectl apply",
		Long: `Prints, as YAML for 'kubectl apply -f -', the manifests built into this vacate:
  install          everything below but force-delete and surge, in order: what
                   a cluster needs to run vacate (--force-delete adds
                   force-delete, --surge adds surge)
  crds             the NodeDrain and DrainPolicy CustomResourceDefinitions
  controller-role  namespace vacate-system, the ClusterRole vacate-controller,
                   its Role for the leader Lease (get and update of the Lease
                   vacate-controller only) and the ClusterRoles
                   vacate-controller-force-delete (pod delete) and
                   vacate-controller-surge (pod create and patch), not bound
  controller       namespace vacate-system, service account, role bindings, a
                   Deployment of vacate-controller (needs --image) and its PDB,
                   its webhooks' Service and certificate Secret, the
                   endpoint-aware MutatingWebhookConfiguration and the
                   ValidatingWebhookConfiguration vacate-nodedrain-policy
                   (people name only a DrainPolicy that selects the node)
  user-role        the ClusterRole vacate-user, for the people who run this CLI
  admission        ValidatingAdmissionPolicies: vacate-controller changes on
                   Nodes only the cordon and vacate's own annotations, taint
                   and finalizer, in a Pod's status only its condition
                   vacate.dev/serving, and creates and changes only true surge
                   replacements, which no one else may make, and in its
                   webhook configurations only the CA bundle; people name,
                   change or clear a DrainPolicy only with the verb use on it,
                   change only their own requesters, set a deadline, an
                   override or Decommission only with its verb, add no
                   finalizer or owner reference to a drain and remove none of
                   vacate's, and set only spec.release on an Evacuation, as
                   themselves
  force-delete     the binding of vacate-controller-force-delete to the
                   controller: needed only by a DrainPolicy with
                   timeouts.onTimeout: ForceDelete
  surge            the binding of vacate-controller-surge to the controller:
                   needed only by a DrainPolicy that surges (surge.pods
                   Annotated or All)
  agent            vacate-agent on every node (needs --agent-image): service
                   account, ClusterRole, DaemonSet, and the admission policy
                   that keeps each agent to its own node; after install
  agent-unit       the systemd unit of vacate-agent's signal mode (not YAML:
                   for /etc/systemd/system/vacate-agent.service)`,
		Example: `  # Install vacate in the current cluster
  vacate manifests install --image ghcr.io/acme/vacate-controller:v0.1.0 | kubectl apply -f -

  # The same, for policies with timeouts.onTimeout: ForceDelete
  vacate manifests install --force-delete --image ghcr.io/acme/vacate-controller:v0.1.0 | kubectl apply -f -

  # The same, for policies that surge (surge.pods Annotated or All)
  vacate manifests install --surge --image ghcr.io/acme/vacate-controller:v0.1.0 | kubectl apply -f -

  # Only the CRDs (to run the controller elsewhere, with --kubeconfig)
  vacate manifests crds | kubectl apply -f -

  # Let alice drain nodes with the CLI
  kubectl create clusterrolebinding alice-vacate --clusterrole vacate-user --user alice

  # Let alice name the DrainPolicy fast in her drains (vacate drain --policy fast):
  # a ClusterRole with vacate's verb use (kubectl create clusterrole refuses it)
  echo '{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "vacate-use-fast"},
    "rules": [{"apiGroups": ["vacate.dev"], "resources": ["drainpolicies"], "resourceNames": ["fast"], "verbs": ["use"]}]}' | kubectl apply -f -
  kubectl create clusterrolebinding alice-vacate-use-fast --clusterrole vacate-use-fast --user alice`,
		ValidArgs: manifestKinds,
		Args: func(cmd *cobra.Command, args []string) error {
			return checkManifestArgs(args, image, agentImage)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "agent-unit" {
				_, err := fmt.Fprint(s.Out, agent.SystemdUnit)
				return err
			}
			var parts []string
			for _, a := range args {
				docs, err := manifest(a, image, agentImage, binds)
				if err != nil {
					return err
				}
				parts = append(parts, docs...)
			}
			_, err := fmt.Fprint(s.Out, bundle.Join(parts))
			return err
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the vacate-controller image, for controller and install")
	cmd.Flags().StringVar(&agentImage, "agent-image", "", "the vacate-agent image, for agent")
	cmd.Flags().BoolVar(&binds.forceDelete, "force-delete", false,
		"install: also bind the ClusterRole vacate-controller-force-delete (pod delete), for DrainPolicies with timeouts.onTimeout: ForceDelete")
	cmd.Flags().BoolVar(&binds.surge, "surge", false,
		"install: also bind the ClusterRole vacate-controller-surge (pod create and patch), for DrainPolicies that surge (surge.pods Annotated or All)")
	return cmd
}

// checkManifestArgs checks the kinds asked for, and that each has the
// image it needs.
func checkManifestArgs(args []string, image, agentImage string) error {
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
		if a == "agent" && agentImage == "" {
			return argsError{`"agent" needs --agent-image, the vacate-agent image to run`}
		}
		if a == "agent-unit" && len(args) > 1 {
			return argsError{`"agent-unit" is a systemd unit, not YAML: print it alone`}
		}
	}
	return nil
}

// manifest returns the documents of one kind. install lists the namespace
// once, first, so that the Role in it applies.
func manifest(kind, image, agentImage string, binds bindings) ([]string, error) {
	switch kind {
	case "install":
		all, err := bundle.Install(image, binds.forceDelete)
		if err != nil {
			return nil, usageError{err}
		}
		if binds.surge {
			all = append(all, manager.SurgeYAML)
		}
		return all, nil
	case "crds":
		b, err := crd.YAML()
		return []string{string(b)}, err
	case "controller-role":
		return []string{manager.NamespaceYAML, string(rbac.ControllerRoleYAML), string(rbac.ForceDeleteRoleYAML), string(rbac.SurgeRoleYAML)}, nil
	case "user-role":
		return []string{string(rbac.UserRoleYAML)}, nil
	case "admission":
		return []string{admission.YAML()}, nil
	case "force-delete":
		return []string{manager.ForceDeleteYAML}, nil
	case "surge":
		return []string{manager.SurgeYAML}, nil
	case "agent":
		y, err := agent.YAML(agentImage)
		if err != nil {
			return nil, usageError{err}
		}
		return []string{y}, nil
	case "controller":
		y, err := manager.ControllerYAML(image)
		if err != nil {
			return nil, usageError{err}
		}
		return []string{y}, nil
	}
	return nil, fmt.Errorf("unknown manifest %q", kind)
}
