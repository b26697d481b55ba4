// Command kubectl is the upstream kubectl, built from source at the version
// pinned in this module's go.mod, for tests and benchmarks of vacate.
package main

import (
	_ "k8s.io/client-go/plugin/pkg/client/auth" // auth plugins, as upstream
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

// main is cmd/kubectl/kubectl.go of Kubernetes 1.30, which sets no klog
// verbosity before the command runs (GetLogVerbosity came later).
func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
