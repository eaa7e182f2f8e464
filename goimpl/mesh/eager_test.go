package mesh

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// eagerPayload is what the root of op i fills a broadcast of count bytes
// with: every op's bytes differ, so a reader that copied a stale or a
// later slot fails the comparison.
func eagerPayload(buf []byte, i int) {
	for j := range buf {
		buf[j] = byte(i*131 + j*7 + i>>8)
	}
}

// TestEagerStream runs, on every rank at its own pace, a long stream of
// eager broadcasts from changing roots and of every size up to EagerBytes,
// with an all-reduce now and then. Nothing waits for the slowest rank
// between operations, so roots run ahead, the slots and stamp lines wrap
// many times, and the held chunks are verified both on the way and before
// each all-reduce. Every reader must get its op's bytes.
func TestEagerStream(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			es := engines(t, n, MinBudget)
			const ops = 3000
			rng := rand.New(rand.NewPCG(uint64(n), 5))
			roots, sizes := make([]int, ops), make([]int, ops)
			for i := range ops {
				roots[i], sizes[i] = rng.IntN(n), rng.IntN(EagerBytes+1)
				if i%5 != 0 {
					roots[i] = i / 5 % n // runs of one root, which runs ahead
				}
			}
			errs := onRanks(n, func(r int) error {
				buf, want := make([]byte, EagerBytes), make([]byte, EagerBytes)
				sum := make([]byte, 4)
				for i := range ops {
					seq := uint64(i + 1)
					if i%97 == 96 {
						c := newCall(transport.KindAllReduce, reduce.Int32, reduce.Sum, 1, 0, seq)
						sum[0], sum[1], sum[2], sum[3] = byte(r+1), 0, 0, 0
						if err := es[r].AllReduce(c, sum); err != nil {
							return err
						}
						if got := int(sum[0]); got != n*(n+1)/2 {
							return fmt.Errorf("op %d: all-reduce gave %d, not %d", i, got, n*(n+1)/2)
						}
						continue
					}
					b, w := buf[:sizes[i]], want[:sizes[i]]
					eagerPayload(w, i)
					if r == roots[i] {
						copy(b, w)
					} else {
						clear(b)
					}
					c := newCall(transport.KindBroadcast, reduce.Uint8, 0, sizes[i], roots[i], seq)
					c.Variant = Eager
					c.Deadline = time.Now().Add(20 * time.Second)
					if err := es[r].Broadcast(c, b, roots[i]); err != nil {
						return fmt.Errorf("op %d: %w", i, err)
					}
					if string(b) != string(w) {
						return fmt.Errorf("op %d: %d bytes from root %d differ", i, sizes[i], roots[i])
					}
				}
				return es[r].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, ops+1))
			})
			noErrors(t, errs)
			for r := range n {
				require.Zero(t, es[r].heldLen, "local rank %d verified every broadcast it rooted by the barrier", r)
				require.Equal(t, es[0].k, es[r].k)
			}
		})
	}
}

// TestEagerRootRunsAhead: the root of eager broadcasts returns from
// stamps-1 of them before the reader has begun any, then waits in the next
// one for the reader to release a slot; the reader then gets each op's
// bytes.
func TestEagerRootRunsAhead(t *testing.T) {
	es := engines(t, 2, MinBudget)
	call := func(i int) *Call {
		c := newCall(transport.KindBroadcast, reduce.Uint8, 0, 4096, 0, uint64(i+1))
		c.Variant = Eager
		c.Deadline = time.Now().Add(20 * time.Second)
		return c
	}
	buf := make([]byte, 4096)
	for i := range stamps {
		eagerPayload(buf, i)
		require.NoError(t, es[0].Broadcast(call(i), buf, 0), "op %d", i)
	}
	require.Equal(t, stamps, es[0].heldLen, "the root holds every broadcast it has not verified")
	blocked := make(chan error, 1)
	go func() {
		b := make([]byte, 4096)
		eagerPayload(b, stamps)
		blocked <- es[0].Broadcast(call(stamps), b, 0)
	}()
	// The root sleeps on the reader's counters: it must see the reader's
	// stamp for op 0, and the reader release the slot, before it reuses it.
	for es[0].free[1].Sleepers()+es[0].ready[1].Sleepers() == 0 {
		select {
		case err := <-blocked:
			t.Fatalf("the root reused a slot the reader has not read (returned %v)", err)
		case <-time.After(time.Millisecond):
		}
	}
	want := make([]byte, 4096)
	for i := range stamps + 1 {
		clear(buf)
		require.NoError(t, es[1].Broadcast(call(i), buf, 0), "op %d", i)
		eagerPayload(want, i)
		require.Equal(t, want, buf, "op %d", i)
	}
	require.NoError(t, <-blocked)
}

// TestEagerMismatchFoundLater: two ranks both take themselves for the root
// of an eager broadcast. Neither reads the other: a rank finds the other's
// stamp when it verifies, at the end of the broadcast if the stamp is
// there by then (rank 1, which runs second), or else at its next
// operation (rank 0), which fails naming the broadcast. A root that
// returns has its own buffer unchanged, which is what a root returns.
func TestEagerMismatchFoundLater(t *testing.T) {
	es := engines(t, 2, MinBudget)
	bcast := func(r int) error {
		c := newCall(transport.KindBroadcast, reduce.Float32, 0, 256, r, 5)
		c.Variant = Eager
		c.Deadline = time.Now().Add(2 * time.Second)
		buf := make([]byte, 1024)
		buf[0] = byte(r + 1)
		err := es[r].Broadcast(c, buf, r)
		require.Equal(t, byte(r+1), buf[0], "local rank %d: a root's buffer changed", r)
		return err
	}
	text := func(r int) string {
		return fmt.Sprintf("expected collective #5 (broadcast float32 count 256 root %d) but local rank %d sent collective #5 (broadcast float32 count 256 root %d)", r, 1-r, 1-r)
	}
	require.NoError(t, bcast(0), "rank 1 has not posted yet")
	err := bcast(1)
	require.ErrorIs(t, err, transport.ErrMismatch)
	require.ErrorContains(t, err, text(1))
	errs := onRanks(2, func(r int) error { return es[r].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, 6)) })
	require.ErrorIs(t, errs[0], transport.ErrMismatch, "rank 0 verifies before the barrier")
	require.ErrorContains(t, errs[0], text(0))
	require.Equal(t, err, errs[1], "rank 1 is broken since the broadcast")
}

// TestEagerThirdRankMismatch: ranks 0 and 1 run an eager broadcast from 0
// while rank 2 runs an allgather. Rank 2 reads rank 0's stamp and fails.
// Rank 1 reads only the root's slot, whose stamp is the op it called: it
// may return, and then with the root's bytes. The root learns at its next
// operation at the latest, as does rank 1.
func TestEagerThirdRankMismatch(t *testing.T) {
	es := engines(t, 3, MinBudget)
	const size = 1024
	first := make([]error, 3)
	errs := againstThirdRankAllGather(es, size, func(r int, c *Call, buf []byte) error {
		c.Variant = Eager
		eagerPayload(buf, 4)
		if r != 0 {
			clear(buf)
		}
		first[r] = es[r].Broadcast(c, buf, 0)
		if first[r] == nil {
			want := make([]byte, size)
			eagerPayload(want, 4)
			if string(want) != string(buf) {
				return fmt.Errorf("the broadcast returned without the root's bytes")
			}
		}
		b := newCall(transport.KindBarrier, 0, 0, 0, 0, 5)
		b.Deadline = time.Now().Add(2 * time.Second)
		return es[r].Barrier(b)
	})
	require.ErrorIs(t, errs[2], transport.ErrMismatch)
	for r := range 2 {
		require.Error(t, errs[r], "local rank %d returned success from the barrier (the broadcast gave %v)", r, first[r])
		require.NotErrorIs(t, errs[r], transport.ErrTimeout, "local rank %d", r)
	}
}
