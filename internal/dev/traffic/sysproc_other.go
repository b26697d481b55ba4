//go:build !linux

package traffic

import "syscall"

// serverProcAttr is empty where there are no network namespaces: starting a
// server fails there anyway.
func serverProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
