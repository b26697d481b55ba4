// Command kubectl is the upstream kubectl, built from source at the version
// pinned in this module's go.mod, for tests and benchmarks of vacate.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // auth plugins, as upstream
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
