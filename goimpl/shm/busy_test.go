package shm

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
		require.GreaterOrEqual(t, hostRunnable(since()), 1.0)
	}
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
	require.False(t, none.Taken(since()), "no evidence, never busy")
	none.Saw(since()) // a nil Busy ignores what it is told

	runnable := 1.0
	b := &Busy{CPUs: 2, Runnable: func() float64 { return runnable }}
	require.False(t, b.Taken(since()), "fewer runnable threads than cores")
	runnable = 2.9
	require.False(t, b.Taken(since()), "now and then a thread more than cores")
	runnable = 3
	require.True(t, b.Taken(since()), "a thread waiting for a core all along")
	runnable = 1
	now := since()
	b.Saw(now)
	require.True(t, b.Taken(now+BusyFor/2), "a seen preemption holds for BusyFor")
	require.False(t, b.Taken(now+BusyFor+time.Millisecond), "and then lapses")
	require.True(t, (&Busy{CPUs: 2, Always: true, Runnable: func() float64 { return 0 }}).Taken(since()))
	crowded := NewBusy(2, true, false)
	require.True(t, crowded.Always && crowded.Crowded, "more ranks than cores: always busy, and yielding pays")
	sleep := NewBusy(2, false, true)
	require.True(t, sleep.Always && !sleep.Crowded, "GOHCCL_WAIT=sleep: busy, polls do not yield")
	require.False(t, NewBusy(2, false, false).Always)
}

// A busy host makes a waiter sleep after BusySpin, however long its idle
// spin and yield phases are; an idle one keeps polling through them.
func TestBusyWaiterSleepsAtOnce(t *testing.T) {
	mem := make([]byte, 2*CounterSize)
	runnable := 8.0
	p := Policy{Spin: time.Hour, YieldFor: time.Hour, BusySpin: 10 * time.Microsecond,
		Busy: &Busy{CPUs: 2, Runnable: func() float64 { return runnable }}}

	c := CounterAt(mem, 0)
	done := make(chan error, 1)
	go func() { done <- c.WaitAtLeast(1, time.Now().Add(time.Minute), nil, &p) }()
	untilAsleep(c) // with the idle policy it would poll for an hour first
	c.Store(1)
	require.NoError(t, <-done)

	// The same policy on an idle host spins: nobody sleeps while it waits.
	runnable = 1
	c = CounterAt(mem, CounterSize)
	go func() { done <- c.WaitAtLeast(1, time.Now().Add(time.Minute), nil, &p) }()
	time.Sleep(20 * time.Millisecond)
	sleepers := c.Sleepers()
	c.Store(1)
	require.NoError(t, <-done)
	if p.Busy.until.Load() == 0 { // unless the test itself lost its core meanwhile
		require.Zero(t, sleepers, "an idle host's waiter polls")
	}
}
