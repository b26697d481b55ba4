// Command vacate-hook runs beside an app (a native sidecar), serves vacate's
// HTTP evacuation protocol on the pod's IP, and carries a drain out by
// running the commands its configuration names (docs/recipes).
package main

import (
	"context"
	"os"

	"github.com/vacate-dev/vacate/internal/sidecar"
)

func main() { os.Exit(sidecar.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
