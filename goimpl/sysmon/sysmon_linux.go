package sysmon

import "syscall"

const nanosleep = syscall.SYS_NANOSLEEP

func setNice(tid, nice int) error {
	// On Linux PRIO_PROCESS with a thread id sets that one thread.
	return syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice)
}

func gettid() int { return syscall.Gettid() }
