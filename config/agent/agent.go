// Package agent embeds the manifests that run vacate-agent: its service
// account, ClusterRole, binding and DaemonSet (agent.yaml, with the image
// left for the installer to set), the ValidatingAdmissionPolicy that keeps
// each agent to its own node (policy.yaml), and the systemd unit of the
// signal mode (vacate-agent.service).
package agent

import (
	_ "embed"

	"github.com/vacate-dev/vacate/config/manager"
)

//go:embed agent.yaml
var agentYAML string

// PolicyYAML is the ValidatingAdmissionPolicy vacate-agent and its binding.
//
//go:embed policy.yaml
var PolicyYAML string

// SystemdUnit is the systemd unit of the signal mode.
//
//go:embed vacate-agent.service
var SystemdUnit string

// YAML returns the agent's manifests and its admission policy, with the
// agent's image set. The namespace vacate-system is the controller's.
func YAML(image string) (string, error) {
	y, err := manager.SetImage(agentYAML, "vacate-agent", image)
	if err != nil {
		return "", err
	}
	return y + "---\n" + PolicyYAML, nil
}
