package shm

import (
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// CounterSize is the bytes a Counter takes in a segment: a cache line of
// its own, so that ranks bumping different counters never share a line.
const CounterSize = 64

// Counter is a monotonically increasing 64-bit count inside shared memory,
// written by one rank and waited on by others. Sleepers wait on a futex on
// its low 32 bits, so a writer only makes a system call when someone sleeps.
type Counter struct {
	v       atomic.Uint64
	waiters atomic.Uint32
	_       uint32
	// woke is when (Unix nanoseconds, a clock every process reads alike)
	// a writer last woke sleepers: a sleeper learns from it how soon its
	// peer answered, without the futex wake-up's own delay.
	woke atomic.Int64
	_    [CounterSize - 24]byte
}

// CounterAt returns the counter at b[off:], which must be 8-byte aligned and
// CounterSize long (offsets that are multiples of 64 in a mapping are).
func CounterAt(b []byte, off int) *Counter {
	_ = b[off+CounterSize-1]
	if uintptr(unsafe.Pointer(&b[off]))%8 != 0 {
		panic("shm: misaligned counter")
	}
	return (*Counter)(unsafe.Pointer(&b[off]))
}

// Load returns the count.
func (c *Counter) Load() uint64 { return c.v.Load() }

// Store publishes v (every write before it is visible to a rank that sees
// v) and wakes sleepers.
func (c *Counter) Store(v uint64) {
	c.v.Store(v)
	// Sequentially consistent: a sleeper registers in waiters before it
	// re-reads v, and this store precedes the load of waiters, so one of
	// the two sides always sees the other.
	if c.waiters.Load() != 0 {
		c.woke.Store(time.Now().UnixNano())
		futexWakeAll(c.word())
	}
}

// Sleepers returns how many waiters are asleep on the counter's futex now
// (or about to be: registered, not yet re-read the count). Tests wait on it
// to reach "the waiter sleeps" instead of sleeping a guessed time.
func (c *Counter) Sleepers() int { return int(c.waiters.Load()) }

// Wake wakes every sleeper without changing the count, so that they look at
// their stop condition.
func (c *Counter) Wake() { futexWakeAll(c.word()) }

// word is the futex word: the low half of v (little-endian machines only,
// which are all gohccl builds for).
func (c *Counter) word() *uint32 { return (*uint32)(unsafe.Pointer(&c.v)) }

// ErrDeadline is returned by waits that reach their deadline.
var ErrDeadline = errors.New("deadline reached")

// Policy is how a rank waits for a peer on shared memory: spin first,
// because a peer on another core answers in well under a microsecond, then
// sleep on the futex, because spinning on a core a peer needs (more local
// ranks than cores, or the job's compute threads) delays that very peer.
// Which of the two a wait can afford is measured while it runs (Busy).
type Policy struct {
	// Spin is how long to poll before sleeping while the host has a core
	// for every runnable thread. Longer costs CPU when a peer is late;
	// shorter costs a futex round trip on waits just past it.
	Spin time.Duration
	// Yield gives the core away between polls of the spin.
	Yield bool
	// YieldFor is how long to keep polling after Spin, giving the core
	// away (sched_yield) between polls, before sleeping, unless a wait
	// has lost its core lately (CoresTaken): on an idle host a futex
	// wake-up costs tens of microseconds (the woken core leaves its idle
	// state), which a pipelined schedule would pay on every chunk; a
	// yielding poller sees its peer at once. Waits longer than this (a
	// peer still computing) sleep, and so does a wait whose yield loses
	// the core for a slice.
	YieldFor time.Duration
	// BusySpin replaces Spin while the host is busy and most of the
	// communicator's recent busy waits were answered only after Spin
	// (Busy.Quick is false): a peer that late has lost its core to the
	// compute, and spinning for it only holds a core the compute needs.
	// While they are answered within Spin, the full spin saves a futex
	// round trip on each wait (20-60 us where the sleeper's core has gone
	// idle, as on a VM). While the host is crowded (more local ranks than
	// cores) BusySpin always replaces Spin, and its polls yield: the core
	// goes to another rank, most likely the awaited one.
	BusySpin time.Duration
	// Busy is the communicator's evidence that the host's cores are taken
	// (nil: never).
	Busy *Busy
}

// DefaultPolicy is the wait policy of a communicator before it attaches
// its own Busy. A policy is the communicator's (it passes its own to every
// wait), so two communicators of one process may wait differently.
var DefaultPolicy = Policy{Spin: 50 * time.Microsecond, YieldFor: 2 * time.Millisecond, BusySpin: 10 * time.Microsecond}

// spinPlan is what one wait will do before it sleeps, and whether it
// should tell Busy how soon it was answered.
func (p *Policy) spinPlan(now time.Duration) (spin, yieldFor time.Duration, yield, learn bool) {
	cores := p.Busy.Cores(now)
	if cores == CoresFree {
		return p.Spin, p.YieldFor, p.Yield, false
	}
	// Yielding polls hand the core to whoever is runnable: with more
	// ranks than cores that is mostly the awaited peer, so they pay.
	if p.Busy.Crowded {
		return min(p.Spin, p.BusySpin), 0, true, false
	}
	spin = p.Spin
	if !p.Busy.Quick() {
		spin = min(p.Spin, p.BusySpin)
	}
	// With a thread that keeps the core (a compute thread), a yield gives
	// it away for a whole slice, so a wait sleeps after its spin once one
	// has (CoresTaken). The runnable count alone cannot tell such a
	// thread from one that gives the core back at once, so under it the
	// wait keeps its yield phase, whose first yield that loses the core
	// ends it.
	if cores == CoresShared {
		yieldFor = p.YieldFor
	}
	return spin, yieldFor, false, true
}

// SpinFor is how long a wait starting now spins before anything else, and
// whether it yields between polls: what a wait loop of its own (a link's)
// should spin for before it calls WaitAtLeastPolling.
func (p *Policy) SpinFor() (spin time.Duration, yield bool) {
	spin, _, yield, _ = p.spinPlan(since())
	return spin, yield
}

var lockedCallers atomic.Bool

// SetLockedCallers says that every wait runs on a thread that C called into
// Go on (the C ABI), which is locked to its goroutine: there a
// runtime.Gosched only hands the P to another thread and takes it back, two
// futex wake-ups, so WaitAtLeast never makes one.
func SetLockedCallers(locked bool) { lockedCallers.Store(locked) }

// SleepSlice bounds one futex sleep of WaitAtLeast, so that a waiter
// notices its stop condition (a broken or aborted communicator) promptly.
const SleepSlice = 10 * time.Millisecond

// WaitAtLeast waits until the count is at least v, under policy p (nil:
// DefaultPolicy). It returns ErrDeadline at deadline, or the first error
// stop returns (stop may be nil; it is called between sleeps, not while
// spinning).
func (c *Counter) WaitAtLeast(v uint64, deadline time.Time, stop func() error, p *Policy) error {
	return c.WaitAtLeastPolling(v, deadline, stop, SleepSlice, p)
}

// WaitAtLeastPolling is WaitAtLeast with each futex sleep, and so the gap
// between calls to stop, at most poll. A goroutine that waits long for rare
// events should poll seldom: every sleep is a system call that holds its P
// until the runtime's sysmon takes it back, and each such retake puts
// sysmon back to its fastest tick, from which it preempts the threads C
// calls in on thousands of times a second (docs/mesh.md).
func (c *Counter) WaitAtLeastPolling(v uint64, deadline time.Time, stop func() error, poll time.Duration, p *Policy) error {
	if c.v.Load() >= v {
		return nil
	}
	if p == nil {
		p = &DefaultPolicy
	}
	began := time.Now()
	start := began.Sub(epoch)
	spin, yieldFor, yield, learn := p.spinPlan(start)
	// answered tells the policy's Busy how soon this wait was answered:
	// now, or, for a sleeper the writer woke, when it woke it.
	answered := func(woken bool) {
		if !learn {
			return
		}
		d := since() - start
		if at := c.woke.Load(); woken && at >= began.UnixNano() {
			d = min(d, time.Duration(at-began.UnixNano()))
		}
		p.Busy.Answered(d, p.Spin)
	}
	last := start
	for i := 1; ; i++ {
		if c.v.Load() >= v {
			answered(false)
			return nil
		}
		if yield {
			syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
		// No runtime.Gosched here: called from C, this goroutine is
		// locked to its thread, and a Gosched hands the P to another
		// thread and back, two futex wake-ups that cost more than the
		// whole wait (perf showed them as the largest kernel cost of a
		// 4 KiB all-reduce through torch).
		if i%64 == 0 {
			now := since()
			if now-last >= Preempted {
				// This thread lost its core between two polls: another
				// thread wants it, and spinning on only delays that one.
				p.Busy.Saw(now)
				break
			}
			last = now
			if now-start >= spin {
				break
			}
		}
	}
	// The wait outlasted its spin: a moment to read the host's runnable
	// threads that costs no one a wait.
	p.Busy.Sample(since())
	for i := 0; yieldFor > 0; i++ {
		if c.v.Load() >= v {
			answered(false)
			return nil
		}
		t := since()
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		now := since()
		if now-t >= Preempted {
			// The yield let another thread run for a slice: the core is
			// wanted, and a sleeper is woken sooner than a poller.
			p.Busy.Saw(now)
			break
		}
		if i%16 == 15 {
			if now-start >= spin+yieldFor {
				break
			}
			// Past the spin, let goroutines that share this P
			// (goroutine ranks of one process) run; a thread that C
			// called in on has nothing to give the P to.
			if !lockedCallers.Load() {
				runtime.Gosched()
			}
		}
	}
	for {
		now := time.Now()
		if !now.Before(deadline) {
			return ErrDeadline
		}
		if stop != nil {
			if err := stop(); err != nil {
				return err
			}
		}
		c.waiters.Add(1)
		seen := c.v.Load()
		if seen >= v {
			c.waiters.Add(^uint32(0))
			answered(false)
			return nil
		}
		futexSleep(c.word(), uint32(seen), min(poll, deadline.Sub(now)))
		c.waiters.Add(^uint32(0))
		if c.v.Load() >= v {
			answered(true) // when the writer woke it, not when it got its core back
			return nil
		}
	}
}
