package traffic

import "syscall"

// serverProcAttr puts a server in a process group of its own, so a
// terminal's Ctrl-C reaches only its parent, which stops it as a kubelet
// would, and has the kernel kill it if the parent dies: a server left behind
// would hold its address in the namespace.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
