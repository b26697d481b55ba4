// Command vacate is the CLI for people (also the kubectl plugin
// kubectl-vacate).
package main

import (
	"os"

	"github.com/vacate-dev/vacate/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
