package devcluster

import "syscall"

// dieWithParent has the kernel kill the process when vacate dies.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
