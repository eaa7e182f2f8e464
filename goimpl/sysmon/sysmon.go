// Package sysmon finds the Go runtime's monitor thread and lowers its
// priority, for a process whose Go code is entered from C.
//
// sysmon is the runtime thread that, without a P, wakes every 20 us to
// 10 ms to retake Ps from threads stuck in system calls and to preempt
// goroutines that ran 10 ms without passing through the scheduler. A thread
// that calls into Go from C (torch's, through the C ABI) looks to it like
// one goroutine that never yields and is in a system call whenever it is
// back in C, so sysmon keeps preempting and retaking, each retake resets it
// to its fastest tick, and it wakes 4,000-5,000 times a second. On a host
// with a core per rank every wake-up preempts a rank's thread, and the
// rank's peers wait for it: a 4 KiB all_reduce through torch took 19.0 us
// a call so and 16.2 us with sysmon lowered (docs/mesh.md). At nice 19
// sysmon still runs, but no longer preempts a rank's thread when its timer
// fires; it waits for the slice to end or the rank's thread to yield. That
// has its own risk (a preempted sysmon can hold up a thread's entry into
// Go), so lowering it is the user's choice, GOHCCL_SYSMON_NICE.
package sysmon

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Find returns the thread id of this process's sysmon: the least thread id
// above the runtime's first thread's, confirmed by being seen sleeping in
// the raw nanosleep system call, which only the Go runtime issues (glibc's
// sleeps use clock_nanosleep) and sysmon issues between every two ticks.
// The confirmation polls for up to 50 ms (on a loaded host sysmon may wait
// that long for a core between sleeps); it needs a P running meanwhile,
// which calling from Go ensures (sysmon sleeps on a futex instead only when
// every P is idle).
func Find() (int, error) {
	if nanosleep < 0 {
		return 0, errors.ErrUnsupported
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	next := 0
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil && tid > m0 && (next == 0 || tid < next) {
			next = tid
		}
	}
	if next == 0 {
		return 0, fmt.Errorf("no thread created after the runtime's first (%d)", m0)
	}
	want := strconv.Itoa(nanosleep)
	file := "/proc/self/task/" + strconv.Itoa(next) + "/syscall"
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, err
		}
		if f := strings.Fields(string(b)); len(f) > 0 && f[0] == want {
			return next, nil
		}
	}
	return 0, fmt.Errorf("thread %d, the first created after the runtime's first, was never seen in nanosleep", next)
}

// m0 is the thread id of the runtime's first thread. Package initialisation
// runs there, locked, after runtime.main created sysmon as its first act, so
// sysmon is the first thread created after it: the least thread id above
// m0 for the life of the process, unless thread ids wrapped around or
// another thread of the process was created in between, which Find's
// confirmation catches. Only the id is taken here, so that loading the
// library costs nothing when sysmon is left alone.
var m0 = gettid()

// Lower sets thread tid's nice value to nice. Raising a nice value needs no
// privilege; lowering it back does, so this is for the life of the process.
func Lower(tid, nice int) error {
	return setNice(tid, nice)
}
