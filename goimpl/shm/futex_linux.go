package shm

import (
	"syscall"
	"time"
	"unsafe"
)

// The futex operations on a word that other processes map too: the
// non-private forms, which key the wait queue by the physical page.
const (
	futexWait = 0
	futexWake = 1
)

// futexSleep blocks while *addr == val, for at most d. Spurious wake-ups
// are fine: every caller re-checks its condition.
func futexSleep(addr *uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every process sleeping on addr.
func futexWakeAll(addr *uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}
