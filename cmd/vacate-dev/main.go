// Command vacate-dev holds vacate's development tools: the local dev
// cluster, the controller run against it, the demo and the reference
// workloads. It is not part of what users install (cmd/vacate).
package main

import (
	"os"

	"github.com/vacate-dev/vacate/internal/dev/devcli"
	"github.com/vacate-dev/vacate/internal/dev/traffic"
)

func main() {
	traffic.MaybeServe() // the demo's web servers are this program
	os.Exit(devcli.Main(os.Args[1:], devcli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
