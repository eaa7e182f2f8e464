package shm

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Busy is what one communicator's waits know about this host's cores right
// now: whether a rank that spins (or polls with sched_yield) while it waits
// would hold a core that another runnable thread needs: the awaited peer,
// another rank, or the job's own compute (backward's threads, a data
// loader). A poller that yields to a thread that keeps the core (a compute
// thread) gets it back only after that thread's scheduler slice
// (milliseconds), where a sleeper woken on the futex is placed at once; a
// poller that yields to threads that give the core back at once (another
// backend's polling threads, a short-lived kernel thread) sees its peer
// sooner than a sleeper, whose wake-up costs tens of microseconds where its
// core has gone idle. So the evidence comes in two strengths (Cores):
//
//   - CoresShared: the host's runnable threads, from /proc/loadavg (read
//     at most once a millisecond per process, by waits that outlast their
//     spin: Sample), averaged over the last samples, are at least one
//     more than the cores this process may use: while this thread runs,
//     some other thread waits for a core, most of the time. Which kind of
//     thread that is the count cannot say, so the wait keeps its yield
//     phase, and a yield that loses the core for a slice turns the
//     verdict to CoresTaken. What the count does change is
//     the spin: the full one only while most recent waits were answered
//     within it (Answered, Quick), since a peer that answers later has
//     lost its core and spinning for it only holds a core someone needs.
//     A moment's crowd (a short-lived process, a kernel thread) does not
//     count: spinning through it costs that thread a little and saves this
//     one a futex wake-up.
//   - CoresTaken: a waiter's own polls were interrupted for longer than
//     Preempted (it was descheduled), or a sched_yield took that long
//     (another thread kept the core): some thread keeps the cores, and for
//     BusyFor after that waits sleep after their spin instead of
//     yield-polling. GOHCCL_WAIT=sleep and a crowded host are taken
//     always.
//
// A crowded host, where the threads that want the cores are the ranks
// themselves, always makes the spin short (Policy.BusySpin) and its polls
// yield. A Busy is safe for concurrent use; the zero value, and a nil
// *Busy, never report busy.
type Busy struct {
	// CPUs is how many cores the host has online (HostCPUs): what the
	// host's runnable threads are compared with. Not this process's
	// affinity: a rank bound to one core (mpirun's default) shares a host
	// whose runnable threads run on all of them.
	CPUs int
	// Always says the host's cores are taken whatever it shows
	// (GOHCCL_WAIT=sleep, or more local ranks than the cores they may run
	// on).
	Always bool
	// Crowded says the threads that want the cores are mostly the ranks
	// themselves (more local ranks than cores): a busy wait's polls then
	// yield, since the thread that gets the core is likely the awaited
	// peer, where a compute thread would keep it for a whole slice.
	Crowded bool
	// Runnable, when set, replaces the averaged reading of /proc/loadavg
	// (tests).
	Runnable func() float64

	until atomic.Int64 // since epoch: preemption evidence holds until then
	slow  atomic.Int64 // share of recent busy waits answered after Spin, of slowOne
}

// slowOne is the fixed-point 1 of Busy.slow; each answered wait moves the
// share by 1/slowWeight of the way to 0 or 1.
const (
	slowOne    = 1 << 16
	slowWeight = 8
)

// Answered records that a wait made while the host was busy was answered
// after d, where the policy's full spin is spin.
func (b *Busy) Answered(d, spin time.Duration) {
	if b == nil {
		return
	}
	target := int64(0)
	if d > spin {
		target = slowOne
	}
	s := b.slow.Load()
	// Concurrent waits may each fold one in; a share either way.
	b.slow.Store(s + (target-s)/slowWeight)
}

// Quick reports whether most of the recent waits made while the host was
// busy were answered within the policy's full spin (true before any).
func (b *Busy) Quick() bool { return b == nil || b.slow.Load() <= slowOne/2 }

// Preempted is the gap between two polls, or the length of one
// sched_yield, that counts as "this thread lost its core to a thread that
// keeps it": a poll of a counter takes nanoseconds and a yield with nothing
// else to run under a microsecond, while a compute thread keeps the core
// for a scheduler slice (0.75 ms and up). Kernel threads that run for tens
// of microseconds (on this VM, DAMON's, about 1.5% of a core) do not count:
// at 50 us they put idle 2-rank all-reduces of 4 KiB into the busy regime
// now and then (7 us instead of 5).
const Preempted = 250 * time.Microsecond

// BusyFor is how long a seen preemption makes waits treat the host as busy.
const BusyFor = 20 * time.Millisecond

// NewBusy returns the evidence of one communicator on a host with cpus
// cores online; crowded says its local ranks are more than the cores they
// may run on together, and always takes the host as busy from the start.
func NewBusy(cpus int, crowded, always bool) *Busy {
	return &Busy{CPUs: cpus, Always: always || crowded, Crowded: crowded}
}

// HostCPUs returns how many cores the host has online
// (/sys/devices/system/cpu/online), or runtime.NumCPU where that cannot be
// read.
func HostCPUs() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := ParseCPUList(string(b)); n > 0 {
			return n
		}
	}
	return runtime.NumCPU()
}

// ParseCPUList counts the cores of a kernel CPU list ("0-3,8,10-11\n":
// 7); 0 when the text does not have that shape.
func ParseCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// Cores is what the evidence says of the host's cores at one moment.
type Cores uint8

const (
	// CoresFree: a core for every runnable thread, as far as anything
	// shows.
	CoresFree Cores = iota
	// CoresShared: more runnable threads than cores on average, and no
	// wait has lost its core lately.
	CoresShared
	// CoresTaken: a wait lost its core within BusyFor (or the host is
	// taken always).
	CoresTaken
)

// Cores says what waits starting at now should take the host's cores to
// be.
func (b *Busy) Cores(now time.Duration) Cores {
	if b == nil || b.CPUs <= 0 {
		return CoresFree
	}
	if b.Always || int64(now) < b.until.Load() {
		return CoresTaken
	}
	count := runnableAverage
	if b.Runnable != nil {
		count = b.Runnable
	}
	if count() >= float64(b.CPUs+1) {
		return CoresShared
	}
	return CoresFree
}

// Sample folds the host's runnable threads into the average Cores reads,
// at most once a millisecond per process. A wait calls it once it has
// outlasted its spin, where the read (about a microsecond, a system call)
// is hidden in a wait that is long anyway; read where a wait begins, it
// landed in the first timed calls of a benchmark's block now and then.
func (b *Busy) Sample(now time.Duration) {
	if b != nil && b.CPUs > 0 && !b.Always && b.Runnable == nil {
		sampleRunnable(now)
	}
}

// Saw records that a wait lost its core at now.
func (b *Busy) Saw(now time.Duration) {
	if b != nil {
		b.until.Store(int64(now + BusyFor))
	}
}

// epoch anchors the monotonic clock that waits read (since: a duration from
// it, without the wall clock's jumps).
var epoch = time.Now()

func since() time.Duration { return time.Since(epoch) }

// The host's runnable-thread count, read from /proc/loadavg at most once
// per runnableEvery, averaged with weight 1/runnableWeight for each new
// sample, and shared by the whole process (it is a fact about the host, not
// about one communicator).
const (
	runnableEvery  = time.Millisecond
	runnableWeight = 8
)

var runnable struct {
	once sync.Once
	fd   int
	at   atomic.Int64
	avg  atomic.Uint64 // float64 bits: the average
}

// runnableAverage returns how many threads the host has had running or
// ready to run, on average over the samples so far (0 before the first, or
// where /proc/loadavg cannot be read: no evidence).
func runnableAverage() float64 { return math.Float64frombits(runnable.avg.Load()) }

// sampleRunnable reads /proc/loadavg's runnable count into the average,
// unless the last sample is younger than runnableEvery, and returns the
// average.
func sampleRunnable(now time.Duration) float64 {
	if at := runnable.at.Load(); at != 0 && int64(now)-at < int64(runnableEvery) {
		return runnableAverage()
	}
	runnable.once.Do(func() {
		runnable.fd = -1
		if f, err := os.Open("/proc/loadavg"); err == nil {
			// Kept open for the life of the process: a pread of it costs
			// about a microsecond, an open and close several.
			fd, err := syscall.Dup(int(f.Fd()))
			f.Close()
			if err == nil {
				runnable.fd = fd
			}
		}
	})
	if runnable.fd < 0 {
		return 0
	}
	var buf [128]byte
	k, err := syscall.Pread(runnable.fd, buf[:], 0)
	if err != nil {
		return 0
	}
	// Concurrent samplers may each fold one in; an average either way.
	avg := foldRunnable(math.Float64frombits(runnable.avg.Load()), float64(ParseRunnable(buf[:k])), runnable.at.Load() == 0)
	runnable.avg.Store(math.Float64bits(avg))
	runnable.at.Store(int64(now))
	return avg
}

// foldRunnable returns the running average after sample n (first: the
// process's first sample). The average starts at one thread, the sampler's
// own, and the first sample moves it like any other: the first samples
// come while the job starts (the other ranks importing, the launcher's and
// the Go runtime's threads), and taken as the average, as until stop 30,
// they held the first waits busy for the tens of milliseconds the average
// took to decay, which is all of a short job's small sizes (Open MPI's C
// ABI bench: a 4 KiB all-reduce 11 us instead of 6).
func foldRunnable(avg, n float64, first bool) float64 {
	if first {
		avg = 1
	}
	return avg + (n-avg)/runnableWeight
}

// ParseRunnable reads the running-or-ready thread count from the contents
// of /proc/loadavg ("0.52 0.58 0.59 3/467 12345": the fourth field's
// numerator); 0 when the text does not have that shape.
func ParseRunnable(b []byte) int {
	field := 0
	for i := 0; i < len(b); i++ {
		if b[i] == ' ' {
			field++
			continue
		}
		if field == 3 {
			n, digits := 0, 0
			for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
				n = n*10 + int(b[i]-'0')
				digits++
			}
			if digits == 0 || i >= len(b) || b[i] != '/' {
				return 0
			}
			return n
		}
	}
	return 0
}
