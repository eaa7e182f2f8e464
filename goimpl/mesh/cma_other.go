//go:build !linux

package mesh

import "syscall"

// processVMRead is Linux's; elsewhere the single-copy schedule is refused
// and one-shot runs.
func processVMRead(int, []byte, uintptr) error { return syscall.ENOSYS }
