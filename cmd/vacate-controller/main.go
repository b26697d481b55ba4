// Command vacate-controller is the vacate operator: the NodeDrain controller
// with leader election, metrics and health probes. It arrives with the drain
// engine (issue 3); until then it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "vacate-controller: not yet implemented (the drain engine is issue 3)")
	os.Exit(1)
}
