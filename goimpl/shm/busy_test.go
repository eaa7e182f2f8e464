package shm

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestParseRunnable(t *testing.T) {
	for text, want := range map[string]int{
		"0.52 0.58 0.59 3/467 12345\n": 3,
		"12.00 9.10 4.00 17/1024 99":   17,
		"0.00 0.00 0.00 0/1 1":         0,
		"":                             0,
		"0.1 0.2 0.3":                  0,
		"0.1 0.2 0.3 x/4 5":            0,
		"0.1 0.2 0.3 12":               0, // no slash: not the shape
	} {
		require.Equal(t, want, ParseRunnable([]byte(text)), "%q", text)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		require.GreaterOrEqual(t, ParseRunnable(b), 1, "this test's own thread runs: %q", b)
		require.GreaterOrEqual(t, sampleRunnable(since()), 1.0)
	}
}

// The runnable average is read from /proc/loadavg only in waits that
// outlast their spin: a wait answered at once, or within its spin, makes
// no system call for it; one past its spin folds a sample in.
func TestOnlyLongWaitsSampleTheRunnableThreads(t *testing.T) {
	if _, err := os.ReadFile("/proc/loadavg"); err != nil {
		t.Skip("no /proc/loadavg")
	}
	p := Policy{Spin: 20 * time.Millisecond, YieldFor: time.Hour, Busy: &Busy{CPUs: 2}}
	c := CounterAt(make([]byte, CounterSize), 0)
	wait := func(v uint64, after time.Duration) {
		go func() { time.Sleep(after); c.Store(v) }()
		require.NoError(t, c.WaitAtLeast(v, time.Now().Add(time.Minute), nil, &p))
	}
	runnable.at.Store(0)
	wait(1, time.Millisecond)     // within the spin
	if p.Busy.until.Load() == 0 { // it kept its core: a lost one ends the spin early
		require.Zero(t, runnable.at.Load(), "a wait answered within its spin read nothing")
	}
	before := since()
	wait(2, 2*p.Spin) // past it
	require.GreaterOrEqual(t, runnable.at.Load(), int64(before), "a wait past its spin took a sample")
	require.GreaterOrEqual(t, runnableAverage(), 1.0, "the sampler's own thread runs")

	at := runnable.at.Load()
	(&Busy{CPUs: 2, Always: true}).Sample(time.Duration(at) + time.Hour)
	(&Busy{CPUs: 2, Runnable: func() float64 { return 8 }}).Sample(time.Duration(at) + time.Hour)
	require.Equal(t, at, runnable.at.Load(), "no sample where the verdict does not read it")
}

// The runnable average starts at the sampler's own thread: one crowded
// sample at start (the job launching) does not make the host busy, a
// crowd that stays does.
func TestFoldRunnable(t *testing.T) {
	const cpus = 2
	avg := foldRunnable(0, 8, true)
	require.Less(t, avg, float64(cpus+1), "one sample of 8 threads at start")
	for range 12 {
		avg = foldRunnable(avg, 4, false)
	}
	require.GreaterOrEqual(t, avg, float64(cpus+1), "a compute thread per rank, sample after sample")
	for range 12 {
		avg = foldRunnable(avg, 2, false)
	}
	require.Less(t, avg, float64(cpus+1), "and gone again")
}

func TestParseCPUList(t *testing.T) {
	for text, want := range map[string]int{
		"0-1\n":        2,
		"0":            1,
		"0-3,8,10-11":  7,
		"0-63,128-191": 128,
		"":             0,
		"3-1":          0,
		"a-b":          0,
		"0-":           0,
	} {
		require.Equal(t, want, ParseCPUList(text), "%q", text)
	}
	require.GreaterOrEqual(t, HostCPUs(), 1)
}

func TestBusyEvidence(t *testing.T) {
	var none *Busy
	require.Equal(t, CoresFree, none.Cores(since()), "no evidence, never busy")
	none.Saw(since()) // a nil Busy ignores what it is told

	runnable := 1.0
	b := &Busy{CPUs: 2, Runnable: func() float64 { return runnable }}
	require.Equal(t, CoresFree, b.Cores(since()), "fewer runnable threads than cores")
	runnable = 2.9
	require.Equal(t, CoresFree, b.Cores(since()), "now and then a thread more than cores")
	runnable = 3
	require.Equal(t, CoresShared, b.Cores(since()), "a thread waiting for a core all along")
	runnable = 1
	now := since()
	b.Saw(now)
	require.Equal(t, CoresTaken, b.Cores(now+BusyFor/2), "a seen preemption holds for BusyFor")
	require.Equal(t, CoresFree, b.Cores(now+BusyFor+time.Millisecond), "and then lapses")
	runnable = 3
	require.Equal(t, CoresTaken, b.Cores(now+BusyFor/2), "a lost core outweighs the count")
	require.Equal(t, CoresTaken, (&Busy{CPUs: 2, Always: true, Runnable: func() float64 { return 0 }}).Cores(since()))
	crowded := NewBusy(2, true, false)
	require.True(t, crowded.Always && crowded.Crowded, "more ranks than cores: always busy, and yielding pays")
	sleep := NewBusy(2, false, true)
	require.True(t, sleep.Always && !sleep.Crowded, "GOHCCL_WAIT=sleep: busy, polls do not yield")
	require.False(t, NewBusy(2, false, false).Always)
}

// Cores taken make a waiter sleep after its spin, however long the idle
// yield phase; a runnable count alone keeps the yield phase; a crowded
// host sleeps after BusySpin, however long Spin; an idle one keeps polling
// through both.
func TestBusyWaiterSleepsAfterItsSpin(t *testing.T) {
	const spin = 100 * time.Millisecond
	mem := make([]byte, 4*CounterSize)
	runnable := 8.0
	shared := &Busy{CPUs: 2, Runnable: func() float64 { return runnable }}
	policy := func(b *Busy) *Policy {
		return &Policy{Spin: spin, YieldFor: time.Hour, BusySpin: 10 * time.Microsecond, Busy: b}
	}
	done := make(chan error, 1)
	wait := func(c *Counter, p *Policy) {
		go func() { done <- c.WaitAtLeast(1, time.Now().Add(time.Minute), nil, p) }()
	}
	// pollsFor checks that c's waiter is still awake after d; a
	// waiter that lost its core meanwhile (the preemption evidence) may
	// sleep early, and then nothing is asserted.
	pollsFor := func(c *Counter, p *Policy, d time.Duration) {
		time.Sleep(d)
		if sleepers := c.Sleepers(); p.Busy.until.Load() == 0 {
			require.Zero(t, sleepers, "the waiter should still poll after %v", d)
		}
	}

	taken := policy(&Busy{CPUs: 2, Always: true})
	c := CounterAt(mem, 0)
	wait(c, taken)
	pollsFor(c, taken, spin/5) // a busy host's waiter spins as an idle one's does
	untilAsleep(c)             // and then sleeps, where an idle one would yield-poll for an hour
	c.Store(1)
	require.NoError(t, <-done)

	sharedPolicy := policy(shared)
	c = CounterAt(mem, CounterSize)
	wait(c, sharedPolicy)
	pollsFor(c, sharedPolicy, spin+spin/2) // the count alone: it yield-polls past its spin
	c.Store(1)
	require.NoError(t, <-done)

	crowded := Policy{Spin: time.Hour, YieldFor: time.Hour, BusySpin: 10 * time.Microsecond,
		Busy: &Busy{CPUs: 2, Always: true, Crowded: true}}
	c = CounterAt(mem, 2*CounterSize)
	wait(c, &crowded)
	untilAsleep(c) // Spin alone would poll for an hour
	c.Store(1)
	require.NoError(t, <-done)

	runnable = 1
	c = CounterAt(mem, 3*CounterSize)
	wait(c, sharedPolicy)
	pollsFor(c, sharedPolicy, spin+spin/2) // an idle host's waiter yield-polls past its spin
	c.Store(1)
	require.NoError(t, <-done)
}

// A busy host's waits spin the full Spin while their peers answer within
// it, and only BusySpin once most answer later, whether the cores are
// taken (no yield phase) or shared by the runnable count (a yield phase,
// whose waits count too); a crowded one always spins BusySpin.
func TestBusyLearnsHowSoonPeersAnswer(t *testing.T) {
	const spin = 5 * time.Millisecond
	for _, tc := range []struct {
		name  string
		busy  *Busy
		yield bool
	}{
		{"taken", &Busy{CPUs: 2, Always: true}, false},
		{"shared", &Busy{CPUs: 2, Runnable: func() float64 { return 8 }}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{Spin: spin, YieldFor: time.Hour, BusySpin: 10 * time.Microsecond, Busy: tc.busy}
			c := CounterAt(make([]byte, CounterSize), 0)
			v := uint64(0)
			answerAfter := func(d time.Duration) {
				v++
				go func(v uint64) { time.Sleep(d); c.Store(v) }(v)
				require.NoError(t, c.WaitAtLeast(v, time.Now().Add(time.Minute), nil, &p))
			}
			plan := func(p *Policy) time.Duration {
				s, yieldFor, _, _ := p.spinPlan(since())
				if tc.busy.until.Load() == 0 { // no wait lost its core meanwhile
					require.Equal(t, tc.yield, yieldFor > 0, "a yield phase only where the count alone says busy")
				}
				return s
			}

			require.Equal(t, spin, plan(&p), "before any wait: the full spin")
			for range 12 {
				answerAfter(4 * spin)
			}
			require.Equal(t, p.BusySpin, plan(&p), "peers that answer after the spin: the short one")
			for range 24 {
				answerAfter(spin / 5) // past BusySpin: these waits sleep or yield-poll, and learn
			}
			require.Equal(t, spin, plan(&p), "peers that answer within the spin again: the full one")

			crowded := p
			crowded.Busy = &Busy{CPUs: 2, Always: true, Crowded: true}
			s, yieldFor, yield, _ := crowded.spinPlan(since())
			require.Equal(t, p.BusySpin, s)
			require.True(t, yield && yieldFor == 0, "a crowded host's spin yields, and it has no yield phase")
		})
	}
}

// A thread that keeps the waiter's core (a compute thread, pinned to it
// here) takes it for a scheduler slice on the waiter's first sched_yield:
// the kernel's own scheduling, not a test hook, makes the host busy, and
// the next wait plans to sleep after its spin instead of yielding. So it
// goes whether the runnable count said idle or shared: the count keeps the
// yield phase, and the yield is what finds the compute.
func TestComputeOnTheWaitersCoreMakesTheHostBusy(t *testing.T) {
	for _, runnable := range []float64{1, 8} {
		t.Run(fmt.Sprintf("runnable=%v", runnable), func(t *testing.T) { computeOnTheWaitersCore(t, runnable) })
	}
}

func computeOnTheWaitersCore(t *testing.T, runnable float64) {
	cpu, err := firstCPU()
	require.NoError(t, err)
	// The compute thread and the waiter each keep a P; the writer needs one.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))

	stop := make(chan struct{})
	defer close(stop)
	pinned := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread exits with the goroutine
		pinned <- pinTo(cpu)
		for n := 0; ; n++ {
			if n%1024 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
		}
	}()
	require.NoError(t, <-pinned)

	b := &Busy{CPUs: 2, Runnable: func() float64 { return runnable }}
	p := Policy{Spin: 10 * time.Microsecond, YieldFor: time.Hour, BusySpin: 10 * time.Microsecond, Busy: b}
	c := CounterAt(make([]byte, CounterSize), 0)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := pinTo(cpu); err != nil {
			done <- err
			return
		}
		go func() { time.Sleep(20 * time.Millisecond); c.Store(1) }()
		done <- c.WaitAtLeast(1, time.Now().Add(time.Minute), nil, &p)
	}()
	require.NoError(t, <-done)
	until := time.Duration(b.until.Load())
	require.NotZero(t, until, "the wait's yield lost its core to the compute thread")
	require.Equal(t, CoresTaken, b.Cores(until-time.Microsecond))
	_, yieldFor, _, _ := p.spinPlan(until - time.Microsecond)
	require.Zero(t, yieldFor, "a wait while that holds sleeps after its spin")
}

// firstCPU returns the lowest core this thread may run on.
func firstCPU() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, err
	}
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			return cpu, nil
		}
	}
	return 0, unix.EINVAL
}

// pinTo binds the calling thread to one core.
func pinTo(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}
