package nodes

import "syscall"

// procAttr makes the kernel kill a node when the harness dies, so that an
// interrupted test or soak leaves no process behind on the database.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
