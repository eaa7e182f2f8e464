package main

import (
	"runtime"
	"sync/atomic"
	"time"
)

// A thread that C calls into Go on is, to the runtime, one goroutine that
// never passes through the scheduler: its P's scheduler tick never moves.
// Every 10 ms the runtime's sysmon then force-preempts it (a round trip
// through the scheduler at its next call), and while the thread is back in
// C, which the runtime counts as a system call, the stale tick also makes
// sysmon take its P away, which puts sysmon back to its 20 us tick for the
// next millisecond or more. A runtime.Gosched every yieldEvery does the same
// round trip at a time of our choosing and keeps the tick moving, so
// neither happens (docs/mesh.md, "The Go runtime's monitor thread").
const yieldEvery = 5 * time.Millisecond

// lastYield is when a caller last yielded, in Unix nanoseconds. It is one
// per process, not per thread: the threads that call in at once are few
// (the caller's and the shim's queue threads), and the one that runs
// collectives back to back is the one whose tick matters.
var lastYield atomic.Int64

// tickScheduler yields the processor if no caller has for yieldEvery.
func tickScheduler() {
	now := time.Now().UnixNano()
	if last := lastYield.Load(); now-last >= int64(yieldEvery) && lastYield.CompareAndSwap(last, now) {
		runtime.Gosched()
	}
}
