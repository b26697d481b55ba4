//go:build !linux

package devcluster

import (
	"syscall"
	"time"
)

// dieWithParent is Linux-only (Pdeathsig). Elsewhere the components outlive
// a vacate that is killed; `vacate dev down` stops them. The dev cluster is
// built and tested on Linux; this keeps the CLI building for macOS.
func dieWithParent(*syscall.SysProcAttr) {}

// processCPU is Linux-only.
func processCPU(int) (time.Duration, bool) { return 0, false }
