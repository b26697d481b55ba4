// Command vacate-agent runs on each node and turns shutdown and preemption
// signals into drain requests. It arrives with its own issue; until then it
// only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "vacate-agent: not yet implemented")
	os.Exit(1)
}
