//go:build !linux

package nodes

import "syscall"

// procAttr has nothing to add where the kernel cannot kill a child with its
// parent: Cluster.Close is then the only cleanup.
func procAttr() *syscall.SysProcAttr { return nil }
