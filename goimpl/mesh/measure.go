package mesh

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/klauspost/cpuid/v2"
	"golang.org/x/sys/unix"

	"github.com/gohccl/gohccl/goimpl/shm"
)

// Figures are what this host's memory does, measured, for pricing the
// engine's schedules against each other (goimpl/tune): how long a hand-off
// between two local ranks takes, and how fast a core copies memory, with
// memcpy and with the kernel's cross-memory copy, at message sizes from
// inside the caches to beyond them. Nothing in them is a constant of one CPU
// model: a VM's share of a cache, a loaded host or a slow kernel path shows
// up in the numbers.
//
// The ranks of a communicator price with the same Figures (one rank
// measures and the others read its figures through the store), so that
// they choose the same schedules.
type Figures struct {
	// HandOff is the seconds from one rank's post to a peer seeing it
	// (half a round trip of two counters), under the communicator's wait
	// policy: sub-microsecond when both ranks have a core, a futex wake-up
	// or a scheduler slice when they share one.
	HandOff float64
	// Syscall is the seconds of one process_vm_readv of a few bytes: the
	// fixed cost of each read of a single-copy schedule.
	Syscall float64
	// Cross is the bytes per second a core copies out of lines another
	// core has just written (they are still in that core's L2): what a
	// schedule pays for reading a peer's data as soon as it is posted.
	Cross float64
	// L2 is the bytes of one core's L2 cache (cpuid; 1 MiB when the CPU
	// does not say): a peer's message up to about this size is still in
	// its cache when this rank reads it.
	L2 int
	// Sizes are the message sizes the rates were measured at, ascending;
	// Copy and Kernel the bytes per second memcpy and process_vm_readv
	// moved at each (bytes copied, not read plus written). Kernel is empty
	// when this process may not use process_vm_readv.
	Sizes, Copy, Kernel []float64
}

// rateSizes are the sizes MeasureHost copies: one in L2, the rest past it
// into the last-level cache and beyond.
var rateSizes = []int{256 << 10, 2 << 20, 8 << 20, 32 << 20}

// Valid reports whether f holds a usable measurement.
func (f Figures) Valid() bool {
	return f.HandOff > 0 && f.Cross > 0 && f.L2 > 0 && len(f.Sizes) > 0 && len(f.Copy) == len(f.Sizes) &&
		(len(f.Kernel) == 0 || len(f.Kernel) == len(f.Sizes))
}

// CopyRate returns memcpy's rate for a message of bytes, interpolated on a
// log scale between the measured sizes (the nearest one outside them).
func (f Figures) CopyRate(bytes float64) float64 { return interpolate(f.Sizes, f.Copy, bytes) }

// KernelRate is CopyRate for process_vm_readv; 0 when it is refused.
func (f Figures) KernelRate(bytes float64) float64 {
	if len(f.Kernel) == 0 {
		return 0
	}
	return interpolate(f.Sizes, f.Kernel, bytes)
}

func interpolate(xs, ys []float64, x float64) float64 {
	switch {
	case len(xs) == 0:
		return 0
	case x <= xs[0]:
		return ys[0]
	case x >= xs[len(xs)-1]:
		return ys[len(ys)-1]
	}
	i := 1
	for xs[i] < x {
		i++
	}
	t := (math.Log(x) - math.Log(xs[i-1])) / (math.Log(xs[i]) - math.Log(xs[i-1]))
	return ys[i-1] + t*(ys[i]-ys[i-1])
}

// String encodes f for the store: "handoff syscall cross l2
// size:copy:kernel ...", times in seconds and rates in bytes per second.
func (f Figures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%g %g %g %d", f.HandOff, f.Syscall, f.Cross, f.L2)
	for i, s := range f.Sizes {
		k := 0.0
		if len(f.Kernel) > 0 {
			k = f.Kernel[i]
		}
		fmt.Fprintf(&b, " %g:%g:%g", s, f.Copy[i], k)
	}
	return b.String()
}

// ParseFigures reads what String wrote.
func ParseFigures(s string) (Figures, error) {
	var f Figures
	fields := strings.Fields(s)
	bad := func() (Figures, error) { return Figures{}, fmt.Errorf("mesh: malformed host figures %q", s) }
	if len(fields) < 5 {
		return bad()
	}
	var err error
	for i, dst := range []*float64{&f.HandOff, &f.Syscall, &f.Cross} {
		if *dst, err = strconv.ParseFloat(fields[i], 64); err != nil || math.IsNaN(*dst) || *dst < 0 {
			return bad()
		}
	}
	if f.L2, err = strconv.Atoi(fields[3]); err != nil {
		return bad()
	}
	kernel := true
	for _, x := range fields[4:] {
		parts := strings.Split(x, ":")
		if len(parts) != 3 {
			return bad()
		}
		var v [3]float64
		for i, p := range parts {
			if v[i], err = strconv.ParseFloat(p, 64); err != nil || math.IsNaN(v[i]) || v[i] < 0 {
				return bad()
			}
		}
		f.Sizes, f.Copy = append(f.Sizes, v[0]), append(f.Copy, v[1])
		f.Kernel = append(f.Kernel, v[2])
		kernel = kernel && v[2] > 0
	}
	if !kernel {
		f.Kernel = nil
	}
	if !f.Valid() {
		return bad()
	}
	return f, nil
}

var host struct {
	once sync.Once
	f    Figures
}

// MeasureHost measures this process's copy rates (Copy, Kernel, Syscall)
// once and returns them; HandOff is left for MeasureHandOff. It takes a few
// tens of milliseconds the first time (it copies about 250 MB) and
// nothing after. The rates are timed in the thread's CPU time, not the
// wall clock: a rate is what a core does while it runs, and a busy host
// that takes the core away for a while would otherwise make a collective
// priced then look many times slower than it is.
func MeasureHost() Figures {
	host.once.Do(func() {
		host.f = measureRates()
		debug.FreeOSMemory() // the 64 MB of buffers go back now, not at some later collection
	})
	f := host.f
	f.Sizes, f.Copy, f.Kernel = slices.Clone(f.Sizes), slices.Clone(f.Copy), slices.Clone(f.Kernel)
	return f
}

func measureRates() Figures {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f := Figures{L2: cpuid.CPU.Cache.L2}
	if f.L2 <= 0 {
		f.L2 = 1 << 20
	}
	largest := rateSizes[len(rateSizes)-1]
	src, dst := make([]byte, largest), make([]byte, largest)
	for i := 0; i < largest; i += 4096 { // fault the pages in before timing
		src[i], dst[i] = 1, 1
	}
	kernel := CanReadPeer(Probe())
	pid := os.Getpid()
	for _, size := range rateSizes {
		// Enough rounds to move 32 MB or more, best of three: the
		// first round of each size warms what the size can warm.
		rounds := max(1, (32<<20)/size)
		best := func(copyOnce func()) float64 {
			t := math.Inf(1)
			for range 3 {
				start := threadTime()
				for range rounds {
					copyOnce()
				}
				t = min(t, threadTime()-start)
			}
			return float64(size*rounds) / max(t, 1e-9)
		}
		s, d := src[:size], dst[:size]
		f.Sizes = append(f.Sizes, float64(size))
		f.Copy = append(f.Copy, best(func() { copy(d, s) }))
		if kernel {
			addr := uintptr(unsafe.Pointer(&s[0]))
			f.Kernel = append(f.Kernel, best(func() { _ = processVMRead(pid, d, addr) }))
		}
	}
	if kernel {
		var one [64]byte
		addr := uintptr(unsafe.Pointer(&src[0]))
		const calls = 200
		start := threadTime()
		for range calls {
			_ = processVMRead(pid, one[:], addr)
		}
		f.Syscall = (threadTime() - start) / calls
	}
	return f
}

// handOffRounds is how many round trips MeasureHandOff times: enough to
// average out a stray wake-up, few enough to take well under a millisecond
// when the ranks have cores of their own.
const handOffRounds = 200

// crossRounds is how many times MeasureHandOff times a cross-core copy.
const crossRounds = 3

// MeasureHandOff times hand-offs between local ranks 0 and 1 over the
// probe counters of the region, then a copy of bytes local rank 1 has just
// written, and returns on local rank 0 the seconds of one hand-off and the
// cross-core copy rate (0, 0 on the others, which only answer). Local ranks
// 0 and 1 must call it together, before the engine's first operation; the
// others need not call it. It waits under the engine's wait policy, until
// deadline.
func (e *Engine) MeasureHandOff(deadline time.Time) (handOff, cross float64, err error) {
	if e.n < 2 || e.me > 1 {
		return 0, 0, nil
	}
	shm.Guard()
	defer func() { err = shm.Recovered(recover(), err) }()
	mine := shm.CounterAt(e.region, e.lay.ctl(e.me, lineProbe))
	theirs := shm.CounterAt(e.region, e.lay.ctl(1-e.me, lineProbe))
	rounds := make([]float64, 0, handOffRounds)
	for i := uint64(1); i <= handOffRounds; i++ {
		start := time.Now()
		if e.me == 0 {
			mine.Store(i)
		}
		if err := theirs.WaitAtLeast(i, deadline, e.stopFn, &e.opt.Wait); err != nil {
			return 0, 0, fmt.Errorf("measuring the hand-off time with %s: %w", e.who(1-e.me), err)
		}
		if e.me == 1 {
			mine.Store(i)
		}
		rounds = append(rounds, time.Since(start).Seconds())
	}
	// The median round trip: a wait now and then that the scheduler
	// stretches (another process took the core) is not what a hand-off
	// costs; a host where most waits go through the futex shows it here.
	slices.Sort(rounds)
	handOff = rounds[len(rounds)/2] / 2
	// The cross-core copy: rank 1 writes its buffers (up to 256 KiB, in
	// its L2) and posts; rank 0 copies them out. Rounds handOffRounds+1
	// on: rank 1 posts the data, rank 0 answers that it has read it.
	data := e.region[e.lay.data(1, 0):][:min(256<<10, depth*e.lay.buf)]
	var sink []byte
	if e.me == 0 {
		sink = make([]byte, len(data))
	}
	best := math.Inf(1)
	for i := uint64(handOffRounds + 1); i <= handOffRounds+crossRounds; i++ {
		if e.me == 1 {
			for j := range data {
				data[j] = byte(i + uint64(j))
			}
			mine.Store(i)
			if err := theirs.WaitAtLeast(i, deadline, e.stopFn, &e.opt.Wait); err != nil {
				return 0, 0, fmt.Errorf("measuring the cross-core copy rate with %s: %w", e.who(0), err)
			}
			continue
		}
		if err := theirs.WaitAtLeast(i, deadline, e.stopFn, &e.opt.Wait); err != nil {
			return 0, 0, fmt.Errorf("measuring the cross-core copy rate with %s: %w", e.who(1), err)
		}
		t := time.Now()
		copy(sink, data)
		best = min(best, time.Since(t).Seconds())
		mine.Store(i)
	}
	if e.me == 1 {
		return 0, 0, nil
	}
	return handOff, float64(len(data)) / max(best, 1e-9), nil
}

// threadTime returns the CPU time of the calling thread, in seconds.
func threadTime() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return float64(time.Now().UnixNano()) / 1e9
	}
	return float64(ts.Nano()) / 1e9
}
