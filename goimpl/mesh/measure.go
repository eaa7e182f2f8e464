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
	// Arrive is the seconds an operation on the engine costs beyond its
	// hand-offs until every local rank has arrived in it: 0 with a core
	// per rank (priced in the hand-offs); with more local ranks than
	// cores, every operation waits until the scheduler has run each rank,
	// most of them woken from a futex, so n wake-ups of a sleeping rank,
	// timed at init as a ring of ranks that each sleep until their
	// predecessor wakes them. The links' schedules do not pay it: a rank
	// sends into a ring and goes on, so ranks drift apart instead of
	// meeting every operation.
	Arrive float64
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

// String encodes f for the store: "handoff syscall cross l2 arrive
// size:copy:kernel ...", times in seconds and rates in bytes per second.
func (f Figures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%g %g %g %d %g", f.HandOff, f.Syscall, f.Cross, f.L2, f.Arrive)
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
	if len(fields) < 6 {
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
	if f.Arrive, err = strconv.ParseFloat(fields[4], 64); err != nil || math.IsNaN(f.Arrive) || f.Arrive < 0 {
		return bad()
	}
	kernel := true
	for _, x := range fields[5:] {
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

// handOffRounds is how many times MeasureHandOff passes the token round the
// ranks at most: enough to average out a stray wake-up, few enough to take
// well under a millisecond when the ranks have cores of their own.
const handOffRounds = 200

// handOffBudget bounds the time the rounds take past the first
// handOffMinRounds: where hand-offs are scheduler wake-ups (more ranks than
// cores), 200 rounds could take seconds of the communicator's init.
const (
	handOffBudget    = 50 * time.Millisecond
	handOffMinRounds = 16
)

// ringEnd, added to a ring's base, is the probe value that ends the ring:
// larger than any round.
const ringEnd = 1 << 40

// wakeRounds is how many rounds time the wake-ups of sleeping ranks.
const wakeRounds = handOffMinRounds

// crossRounds is how many times MeasureHandOff times a cross-core copy.
const crossRounds = 3

// MeasureHandOff times hand-offs among the local ranks over the probe
// counters of the region, then a copy of bytes local rank 1 has just
// written, and returns on local rank 0 the seconds of one hand-off and the
// cross-core copy rate (0, 0 on the others, which only answer). Every local
// rank must call it, together, before the engine's first operation. It
// waits under the engine's wait policy, until deadline.
//
// A hand-off is timed as what the engine's schedules wait for: local rank
// 0 posts, each rank in turn waits for its predecessor's post and posts,
// and rank 0 times the token's way round, a round of n hand-offs. With two
// ranks that is a ping-pong. With more ranks than cores it includes what
// the schedules pay there: a rank that waits for a peer waits until the
// scheduler runs it, and every operation on the engine needs each local
// rank to run.
func (e *Engine) MeasureHandOff(deadline time.Time) (handOff, arrive, cross float64, err error) {
	if e.n < 2 {
		return 0, 0, 0, nil
	}
	shm.Guard()
	defer func() { err = shm.Recovered(recover(), err) }()
	probe := func(r int) *shm.Counter { return shm.CounterAt(e.region, e.lay.ctl(r, lineProbe)) }
	if handOff, err = e.ring(probe, 0, handOffRounds, &e.opt.Wait, deadline); err != nil {
		return 0, 0, 0, err
	}
	// The wake-ups every operation needs with more ranks than cores: the
	// same ring with ranks that sleep at once. Every rank runs it (a rank
	// whose affinity gives it fewer cores would otherwise decide
	// differently and stall the ring); local rank 0 counts it only where
	// its own wait policy says the host is crowded.
	sleep := shm.Policy{Busy: &shm.Busy{CPUs: 1, Always: true}}
	wake, err := e.ring(probe, ringEnd, wakeRounds, &sleep, deadline)
	if err != nil {
		return 0, 0, 0, err
	}
	if e.opt.Wait.Busy != nil && e.opt.Wait.Busy.Crowded {
		arrive = float64(e.n) * wake
	}
	base := uint64(2 * ringEnd)
	if e.me > 1 {
		return 0, 0, 0, nil
	}
	// The cross-core copy: rank 1 writes its buffers (up to 256 KiB, in
	// its L2) and posts; rank 0 copies them out and answers that it has.
	mine, theirs := probe(e.me), probe(1-e.me)
	data := e.region[e.lay.data(1, 0):][:min(256<<10, depth*e.lay.buf)]
	var sink []byte
	if e.me == 0 {
		sink = make([]byte, len(data))
	}
	best := math.Inf(1)
	for i := base + 1; i <= base+crossRounds; i++ {
		if e.me == 1 {
			for j := range data {
				data[j] = byte(i + uint64(j))
			}
			mine.Store(i)
			if err := theirs.WaitAtLeast(i, deadline, e.stopFn, &e.opt.Wait); err != nil {
				return 0, 0, 0, fmt.Errorf("measuring the cross-core copy rate with %s: %w", e.who(0), err)
			}
			continue
		}
		if err := theirs.WaitAtLeast(i, deadline, e.stopFn, &e.opt.Wait); err != nil {
			return 0, 0, 0, fmt.Errorf("measuring the cross-core copy rate with %s: %w", e.who(1), err)
		}
		t := time.Now()
		copy(sink, data)
		best = min(best, time.Since(t).Seconds())
		mine.Store(i)
	}
	if e.me == 1 {
		return 0, 0, 0, nil
	}
	return handOff, arrive, float64(len(data)) / max(best, 1e-9), nil
}

// ring passes a token round the local ranks over the probe counters, with
// values base+1, base+2, ..., for at most rounds rounds (fewer once
// handOffMinRounds have taken handOffBudget), then ends it with
// base+ringEnd, and returns on local rank 0 the median seconds of one
// hand-off (a round over n); 0 on the others. Local rank 0 posts, each rank
// in turn waits for its predecessor's post and posts, and rank 0 times the
// token's way round. Every local rank must call it, with the same base.
func (e *Engine) ring(probe func(int) *shm.Counter, base uint64, rounds int, p *shm.Policy, deadline time.Time) (float64, error) {
	mine, prev := probe(e.me), probe((e.me+e.n-1)%e.n)
	end := base + ringEnd
	failed := func(err error) (float64, error) {
		return 0, fmt.Errorf("measuring the hand-off time with %s: %w", e.who((e.me+e.n-1)%e.n), err)
	}
	if e.me != 0 {
		for i := base + 1; ; i++ {
			if err := prev.WaitAtLeast(i, deadline, e.stopFn, p); err != nil {
				return failed(err)
			}
			if prev.Load() >= end {
				mine.Store(end)
				return 0, nil
			}
			mine.Store(i)
		}
	}
	times := make([]float64, 0, rounds)
	begin := time.Now()
	for i := base + 1; i <= base+uint64(rounds); i++ {
		start := time.Now()
		mine.Store(i)
		if err := prev.WaitAtLeast(i, deadline, e.stopFn, p); err != nil {
			return failed(err)
		}
		times = append(times, time.Since(start).Seconds())
		if len(times) >= handOffMinRounds && time.Since(begin) > handOffBudget {
			break
		}
	}
	mine.Store(end)
	if err := prev.WaitAtLeast(end, deadline, e.stopFn, p); err != nil {
		return failed(err)
	}
	// The median round: a wait now and then that the scheduler stretches
	// (another process took the core) is not what a hand-off costs; a
	// host where most waits go through the futex shows it here.
	slices.Sort(times)
	return times[len(times)/2] / float64(e.n), nil
}

// threadTime returns the CPU time of the calling thread, in seconds.
func threadTime() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return float64(time.Now().UnixNano()) / 1e9
	}
	return float64(ts.Nano()) / 1e9
}
