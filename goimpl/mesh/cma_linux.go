package mesh

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// processVMRead copies len(dst) bytes from address addr of process pid into
// dst with process_vm_readv, looping over short reads.
func processVMRead(pid int, dst []byte, addr uintptr) error {
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(dst)}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			return err
		}
		if n == 0 {
			return syscall.EFAULT
		}
		dst, addr = dst[n:], addr+uintptr(n)
	}
	return nil
}
