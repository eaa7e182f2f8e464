package mesh

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/stretchr/testify/require"
)

// TestMismatch has the ranks issue different collectives as the same
// operation: every rank that reads a differing stamp fails with
// ErrMismatch, naming both fingerprints and both ranks.
func TestMismatch(t *testing.T) {
	cases := []struct {
		name string
		// call returns rank r's call; run runs it.
		call func(r int) *Call
		run  func(e *Engine, c *Call, buf []byte) error
		// want holds, per rank, the text its error must contain ("" for
		// a rank that does not read the other stamp, which may succeed).
		// A rank whose peer failed first says so (ErrPeerLost) with the
		// peer's error.
		want []string
	}{
		{"count",
			func(r int) *Call { return newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 256+r, 0, 7) },
			func(e *Engine, c *Call, buf []byte) error { return e.AllReduce(c, buf[:4*c.Stamp.Count]) },
			[]string{"local rank 0 (this process) expected collective #7 (allreduce float32 count 256 op sum) but local rank 1 sent collective #7 (allreduce float32 count 257 op sum)",
				"local rank 1 (this process) expected collective #7 (allreduce float32 count 257 op sum) but local rank 0 sent collective #7 (allreduce float32 count 256 op sum)"}},
		{"seq",
			func(r int) *Call {
				return newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 256, 0, uint64(7+r))
			},
			func(e *Engine, c *Call, buf []byte) error { return e.AllReduce(c, buf[:1024]) },
			[]string{"expected collective #7 (allreduce float32 count 256 op sum) but local rank 1 sent collective #8",
				"expected collective #8 (allreduce float32 count 256 op sum) but local rank 0 sent collective #7"}},
		{"kind",
			func(r int) *Call {
				if r == 0 {
					return newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 256, 0, 3)
				}
				return newCall(transport.KindBroadcast, reduce.Float32, 0, 256, 0, 3)
			},
			func(e *Engine, c *Call, buf []byte) error {
				if c.Stamp.Kind == transport.KindBroadcast {
					return e.Broadcast(c, buf[:1024], 0)
				}
				return e.AllReduce(c, buf[:1024])
			},
			// Rank 1 (not the broadcast's root) reads rank 0's
			// all-reduce stamp and fails; rank 0 reads the stamp rank 1
			// posts for the root to check (or, asleep, learns of rank
			// 1's failure first): both texts name both operations.
			[]string{"collective #3 (broadcast float32 count 256 root 0)",
				"expected collective #3 (broadcast float32 count 256 root 0) but local rank 0 sent collective #3 (allreduce float32 count 256 op sum)"}},
		{"root",
			// Both believe they are the broadcast's root: neither reads
			// the other's data, so only the root's check of every stamp
			// keeps each from returning its own buffer as the result.
			func(r int) *Call { return newCall(transport.KindBroadcast, reduce.Float32, 0, 256, r, 5) },
			func(e *Engine, c *Call, buf []byte) error { return e.Broadcast(c, buf[:1024], int(c.Stamp.Root)) },
			[]string{"collective #5 (broadcast float32 count 256 root 1)", "collective #5 (broadcast float32 count 256 root 0)"}},
		{"reduce root",
			// Each takes the other for the root of a reduce: neither
			// reduces, so only the look at the root's stamp makes them
			// fail instead of returning as if it had happened.
			func(r int) *Call { return newCall(transport.KindReduce, reduce.Float32, reduce.Sum, 256, 1-r, 5) },
			func(e *Engine, c *Call, buf []byte) error { return e.Reduce(c, buf[:1024], int(c.Stamp.Root)) },
			[]string{"expected collective #5 (reduce float32 count 256 op sum root 1) but local rank 1 sent collective #5 (reduce float32 count 256 op sum root 0)",
				"expected collective #5 (reduce float32 count 256 op sum root 0) but local rank 0 sent collective #5 (reduce float32 count 256 op sum root 1)"}},
		{"dtype",
			func(r int) *Call {
				return newCall(transport.KindAllReduce, []reduce.DType{reduce.Float32, reduce.Int32}[r], reduce.Sum, 256, 0, 3)
			},
			func(e *Engine, c *Call, buf []byte) error { return e.AllReduce(c, buf[:1024]) },
			[]string{"collective #3 (allreduce float32 count 256 op sum) but local rank 1 sent collective #3 (allreduce int32 count 256 op sum)", ""}},
		{"schedule",
			// Same stamp, different schedule: a reduce-scatter of the
			// blocks against an allgather of them.
			func(r int) *Call { return newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 256, 0, 3) },
			nil,
			[]string{"expected chunk 0 of the reduce-scatter blocks schedule in collective #3 (allreduce float32 count 256 op sum) but local rank 1 sent chunk 0 of the allgather blocks schedule", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			es := engines(t, 2, MinBudget)
			errs := onRanks(2, func(r int) error {
				c := tc.call(r)
				c.Deadline = time.Now().Add(2 * time.Second)
				buf := make([]byte, 4096)
				if tc.run == nil {
					if r == 0 {
						return es[r].ReduceScatterBlocks(c, buf[:1024], 256)
					}
					return es[r].AllGatherBlocks(c, buf[:1024], 256)
				}
				return tc.run(es[r], c, buf)
			})
			for r, want := range tc.want {
				if want == "" {
					continue
				}
				if !errors.Is(errs[r], transport.ErrPeerLost) {
					require.ErrorIs(t, errs[r], transport.ErrMismatch, "local rank %d", r)
				}
				require.ErrorContains(t, errs[r], want, "local rank %d", r)
			}
			// The engine is broken now: later calls fail with the first error.
			for r := range 2 {
				if errs[r] != nil {
					err := es[r].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, 99))
					require.Equal(t, errs[r], err)
				}
			}
		})
	}
}

// TestBroadcastThirdRankMismatch: ranks 0 and 1 broadcast from 0 while
// rank 2 runs an allgather. A broadcast's readers read every rank's
// buffers, which rank 2 writes with its own data, so none of the three
// may return success: each checks every stamp by the last chunk.
func TestBroadcastThirdRankMismatch(t *testing.T) {
	for _, size := range []int{1024, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			es := engines(t, 3, MinBudget)
			errs := againstThirdRankAllGather(es, size, func(r int, c *Call, buf []byte) error {
				return es[r].Broadcast(c, buf, 0)
			})
			for r, err := range errs {
				require.Error(t, err, "local rank %d returned success", r)
			}
		})
	}
}

// againstThirdRankAllGather runs collective #4 on three engines: rank 2
// an allgather of size bytes per rank, ranks 0 and 1 bcast, given a
// broadcast call of size bytes from root 0 and the size-byte buffer to
// broadcast. Every call has a 2 s deadline.
func againstThirdRankAllGather(es []*Engine, size int, bcast func(r int, c *Call, buf []byte) error) []error {
	return onRanks(3, func(r int) error {
		buf := make([]byte, 3*size)
		if r == 2 {
			c := newCall(transport.KindAllGather, reduce.Float32, 0, size/4, 0, 4)
			c.Deadline = time.Now().Add(2 * time.Second)
			return es[r].AllGather(c, buf[:size], buf)
		}
		c := newCall(transport.KindBroadcast, reduce.Float32, 0, size/4, 0, 4)
		c.Deadline = time.Now().Add(2 * time.Second)
		return bcast(r, c, buf[:size])
	})
}

func TestMismatchNamesCommunicatorRanks(t *testing.T) {
	es := engines(t, 2, MinBudget)
	for r, e := range es {
		require.NoError(t, e.SetRanks([]int{4, 6}), "local rank %d", r)
	}
	errs := onRanks(2, func(r int) error {
		c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 16+r, 0, 1)
		return es[r].AllReduce(c, make([]byte, 4*(16+r)))
	})
	require.ErrorContains(t, errs[0], "collective mismatch: rank 4 (this process) expected collective #1 (allreduce float32 count 16 op sum) but rank 6 sent collective #1 (allreduce float32 count 17 op sum)")
}

// TestTimeout leaves one rank out: the others fail at the deadline, naming
// the operation, its sequence number and the missing rank.
func TestTimeout(t *testing.T) {
	for _, size := range []int{4096, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			es := engines(t, 3, MinBudget)
			const wait = 200 * time.Millisecond
			t0 := time.Now()
			errs := onRanks(2, func(r int) error {
				c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, size/4, 0, 12)
				c.Deadline = time.Now().Add(wait)
				return es[r].AllReduce(c, make([]byte, size))
			})
			took := time.Since(t0)
			require.GreaterOrEqual(t, took, wait)
			require.Less(t, took, wait+time.Second)
			timedOut := 0
			for r, err := range errs {
				// A rank either reaches its deadline itself or, asleep,
				// learns first that the other one did.
				var te *TimeoutError
				if errors.As(err, &te) {
					timedOut++
					require.Equal(t, []int{2}, te.Missing)
				} else {
					require.ErrorIs(t, err, transport.ErrPeerLost, "local rank %d", r)
				}
				require.ErrorContains(t, err, fmt.Sprintf("timed out waiting for collective #12 (allreduce float32 count %d op sum) on shared memory: no inputs from local rank 2 (chunk 1 of", size/4))
			}
			require.NotZero(t, timedOut)
		})
	}
}

// TestTimeoutNamesEveryMissingRank: two of four ranks absent.
func TestTimeoutNamesEveryMissingRank(t *testing.T) {
	es := engines(t, 4, MinBudget)
	errs := onRanks(2, func(r int) error {
		c := newCall(transport.KindBarrier, 0, 0, 0, 0, 1)
		c.Deadline = time.Now().Add(100 * time.Millisecond)
		return es[r*3].Barrier(c) // local ranks 0 and 3
	})
	for _, err := range errs {
		// As in TestTimeout, a rank may learn of the other's timeout first.
		require.ErrorContains(t, err, "no inputs from local ranks 1, 2")
		var te *TimeoutError
		if errors.As(err, &te) {
			require.Equal(t, []int{1, 2}, te.Missing)
		}
	}
}

// TestCloseWakesWaiter: Close from another goroutine ends a wait that has
// no deadline, promptly, and later calls fail.
func TestCloseWakesWaiter(t *testing.T) {
	es := engines(t, 2, MinBudget)
	done := make(chan error, 1)
	go func() {
		c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 1024, 0, 1)
		c.Deadline = time.Time{}
		done <- es[0].AllReduce(c, make([]byte, 4096))
	}()
	untilAsleep(t, es[0]) // past the spin, asleep on the futex
	t0 := time.Now()
	es[0].Close()
	require.Less(t, time.Since(t0), time.Second, "Close returns once the waiter left (a sleep slice is 10 ms; the margin is for a loaded machine)")
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrClosed)
	default:
		t.Fatal("Close returned before the operation did")
	}
	require.ErrorIs(t, es[0].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, 2)), transport.ErrClosed)
	es[0].Close() // twice is fine
}

// TestStop: the stop check ends a sleeping wait with its error.
func TestStop(t *testing.T) {
	es := engines(t, 2, MinBudget)
	broken := errors.New("communicator aborted")
	var stop = make(chan struct{})
	es[0].SetStop(func() error {
		select {
		case <-stop:
			return broken
		default:
			return nil
		}
	})
	done := make(chan error, 1)
	go func() {
		c := newCall(transport.KindBroadcast, reduce.Float32, 0, 1024, 1, 1)
		done <- es[0].Broadcast(c, make([]byte, 4096), 1)
	}()
	untilAsleep(t, es[0])
	close(stop)
	t0 := time.Now()
	select {
	case err := <-done:
		require.ErrorIs(t, err, broken)
		require.ErrorContains(t, err, "collective #1 (broadcast float32 count 1024 root 1) on shared memory: communicator aborted")
		require.Less(t, time.Since(t0), time.Second, "within a sleep slice or so, not at the 60 s deadline")
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not end the wait")
	}
}

// TestPeerClosed: a peer that closes its engine ends its peers' waits for
// it without their deadline.
func TestPeerClosed(t *testing.T) {
	es := engines(t, 2, MinBudget)
	done := make(chan error, 1)
	go func() {
		c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 1024, 0, 1)
		done <- es[0].AllReduce(c, make([]byte, 4096))
	}()
	untilAsleep(t, es[0])
	es[1].Close()
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrPeerLost)
		require.ErrorContains(t, err, "local rank 1 closed its communicator")
	case <-time.After(5 * time.Second):
		t.Fatal("the peer's close did not end the wait")
	}
}

// TestFailedPeer: a rank whose operation failed tells its peers, whose
// later waits on it fail at once instead of at their deadline.
func TestFailedPeer(t *testing.T) {
	es := engines(t, 2, MinBudget)
	c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 1024, 0, 1)
	c.Deadline = time.Now().Add(10 * time.Millisecond)
	require.ErrorIs(t, es[1].AllReduce(c, make([]byte, 4096)), transport.ErrTimeout)
	// Rank 1 had posted its inputs (both chunks of the minimum budget): rank 0's #1 completes, its #2 cannot.
	require.NoError(t, es[0].AllReduce(newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 1024, 0, 1), make([]byte, 4096)))
	t0 := time.Now()
	c = newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 1024, 0, 2)
	err := es[0].AllReduce(c, make([]byte, 4096))
	require.ErrorIs(t, err, transport.ErrPeerLost)
	require.ErrorContains(t, err, "collective #2 (allreduce float32 count 1024 op sum) on shared memory: rank 1 aborted: timed out waiting for collective #1 (allreduce float32 count 1024 op sum) on shared memory: no inputs from local rank 0 (chunk 1 of 2)")
	require.Less(t, time.Since(t0), time.Second)
}

func TestInvalidArguments(t *testing.T) {
	es := engines(t, 2, MinBudget)
	c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 3, 0, 1)
	require.ErrorContains(t, es[0].AllReduce(c, make([]byte, 7)), "not a whole number of float32 elements")
	require.ErrorContains(t, es[0].ReduceScatter(c, make([]byte, 12), make([]byte, 4)), "not 2 blocks of 4")
	require.ErrorContains(t, es[0].AllGather(c, make([]byte, 4), make([]byte, 4)), "not 2 blocks of 4")
	require.ErrorContains(t, es[0].Broadcast(c, make([]byte, 4), 2), "root 2 is not a local rank")
	require.ErrorContains(t, es[0].ReduceScatterBlocks(c, make([]byte, 8), 3), "buffer of 8 bytes for 3 float32 elements")
	nok := *c
	nok.Kernel3 = nil
	require.ErrorContains(t, es[0].AllReduce(&nok, make([]byte, 12)), "no reduce kernel")
	// None of these broke the engine.
	noErrors(t, onRanks(2, func(r int) error { return es[r].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, 1)) }))

	_, err := Attach(make([]byte, 100), 2, 0, MinBudget, testOptions(2))
	require.ErrorContains(t, err, "region is 100 bytes")
	_, err = Attach(region(2, MinBudget), 2, 2, MinBudget, testOptions(2))
	require.ErrorContains(t, err, "local rank 2 of 2")
}

// TestLayoutMismatch: a peer that computed another layout (another build)
// is refused rather than read in the wrong places.
func TestLayoutMismatch(t *testing.T) {
	es := engines(t, 2, MinBudget)
	es[1].info(1)[infoPiece]++ // as if rank 1 had computed other pieces
	errs := onRanks(2, func(r int) error {
		c := newCall(transport.KindBarrier, 0, 0, 0, 0, 1)
		c.Deadline = time.Now().Add(time.Second)
		return es[r].Barrier(c)
	})
	require.ErrorIs(t, errs[0], transport.ErrProtocol)
	require.ErrorContains(t, errs[0], "local rank 1 attached to the shared region with layout")
}

// untilAsleep returns once one of e's waits sleeps on a counter's futex (the
// state the wake-up tests start from), or fails the test after 10 s.
func untilAsleep(t *testing.T, e *Engine) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		for r := range e.ready {
			if e.ready[r].Sleepers() > 0 || e.free[r].Sleepers() > 0 {
				return
			}
		}
	}
	t.Fatal("no wait of the engine fell asleep within 10 s")
}
