package shm

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testName(t *testing.T) string {
	return fmt.Sprintf("%stest-%d-%d", Prefix, os.Getpid(), time.Now().UnixNano())
}

func TestCreateOpenUnlink(t *testing.T) {
	name := testName(t)
	s, err := Create(name, 1<<16)
	require.NoError(t, err)
	defer s.Close()
	st, err := os.Stat(Path(name))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	_, err = Create(name, 1<<16)
	require.Error(t, err, "a second create of one name must fail")

	_, err = Open(name, 1<<15)
	require.ErrorContains(t, err, "expected 32768")

	o, err := Open(name, 1<<16)
	require.NoError(t, err)
	defer o.Close()
	s.Bytes()[100] = 42
	require.Equal(t, byte(42), o.Bytes()[100], "both mappings see one memory")

	require.NoError(t, s.Unlink())
	require.NoError(t, s.Unlink(), "unlinking twice is fine")
	_, err = Open(name, 1<<16)
	require.ErrorIs(t, err, ErrNotFound)
	o.Bytes()[101] = 7
	require.Equal(t, byte(7), s.Bytes()[101], "mappings outlive the name")
}

func TestOpenRefusesLooseMode(t *testing.T) {
	name := testName(t)
	require.NoError(t, os.WriteFile(Path(name), make([]byte, 4096), 0o644))
	defer os.Remove(Path(name))
	require.NoError(t, os.Chmod(Path(name), 0o644))
	_, err := Open(name, 4096)
	require.ErrorContains(t, err, "only 0600 is trusted")
}

func TestBadNames(t *testing.T) {
	for _, n := range []string{"x", Prefix + "a/b", "../" + Prefix} {
		_, err := Create(n, 10)
		require.Error(t, err, n)
	}
}

func TestTruncatedSegmentIsAnError(t *testing.T) {
	name := testName(t)
	s, err := Create(name, 1<<16)
	require.NoError(t, err)
	defer s.Close()
	defer s.Unlink()
	require.NoError(t, os.Truncate(Path(name), 0))
	err = func() (err error) {
		Guard()
		defer func() { err = Recovered(recover(), err) }()
		sink += s.Bytes()[1<<15]
		return nil
	}()
	require.ErrorContains(t, err, "shared memory vanished")
}

var sink byte

func TestCounterWait(t *testing.T) {
	for _, p := range []Policy{DefaultPolicy, {Spin: 50 * time.Microsecond}, {Spin: 0}, {Spin: time.Microsecond, Yield: true}, {YieldFor: time.Millisecond}} {
		t.Run(fmt.Sprintf("%+v", p), func(t *testing.T) {
			mem := make([]byte, 2*CounterSize)
			ping, pong := CounterAt(mem, 0), CounterAt(mem, CounterSize)
			const rounds = 2000
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(1); i <= rounds; i++ {
					if err := ping.WaitAtLeast(i, time.Now().Add(10*time.Second), nil, &p); err != nil {
						t.Error(err)
						return
					}
					pong.Store(i)
				}
			}()
			for i := uint64(1); i <= rounds; i++ {
				ping.Store(i)
				require.NoError(t, pong.WaitAtLeast(i, time.Now().Add(10*time.Second), nil, &p))
			}
			wg.Wait()
		})
	}
}

func TestCounterDeadlineAndStop(t *testing.T) {
	mem := make([]byte, CounterSize)
	c := CounterAt(mem, 0)
	t0 := time.Now()
	require.ErrorIs(t, c.WaitAtLeast(1, time.Now().Add(30*time.Millisecond), nil, nil), ErrDeadline)
	require.Less(t, time.Since(t0), time.Second)

	stopped := fmt.Errorf("stopped")
	var stop atomic.Pointer[error]
	go func() { untilAsleep(c); stop.Store(&stopped); c.Wake() }()
	t0 = time.Now()
	err := c.WaitAtLeast(1, time.Now().Add(10*time.Second), func() error {
		if p := stop.Load(); p != nil {
			return *p
		}
		return nil
	}, nil)
	require.ErrorIs(t, err, stopped)
	require.Less(t, time.Since(t0), time.Second, "a stop is seen within a sleep slice")
}

func TestCounterPollSpacesStopCalls(t *testing.T) {
	mem := make([]byte, CounterSize)
	c := CounterAt(mem, 0)
	futex := &Policy{} // straight to the futex
	const wait, poll = 300 * time.Millisecond, 60 * time.Millisecond
	calls := 0
	err := c.WaitAtLeastPolling(1, time.Now().Add(wait), func() error { calls++; return nil }, poll, futex)
	require.ErrorIs(t, err, ErrDeadline)
	require.LessOrEqual(t, calls, int(wait/poll)+1, "stop is called once per sleep, and a sleep lasts the poll")
	require.GreaterOrEqual(t, calls, 1)

	// Woken, a long-polling waiter still sees its count at once.
	go func() { untilAsleep(c); c.Store(1) }()
	t0 := time.Now()
	require.NoError(t, c.WaitAtLeastPolling(1, time.Now().Add(10*time.Second), nil, time.Hour, futex))
	require.Less(t, time.Since(t0), 5*time.Second)
}

// untilAsleep returns once a waiter sleeps on c's futex: the state the
// wake-up tests need, reached without guessing how long it takes.
func untilAsleep(c *Counter) {
	for c.Sleepers() == 0 {
		time.Sleep(50 * time.Microsecond)
	}
}
