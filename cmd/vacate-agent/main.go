// Command vacate-agent runs on each node and turns the signals that the
// machine is going away (a shutdown or reboot from logind, SIGTERM in
// signal mode, a cloud's spot, maintenance or scale-in notice) into drain
// requests, holding the shutdown until the node is drained or a deadline.
package main

import (
	"os"

	"github.com/vacate-dev/vacate/internal/agent/app"
)

func main() { os.Exit(app.Main(os.Args[1:], os.Stdout, os.Stderr)) }
