package pattern

import (
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDisseminationKnown(t *testing.T) {
	d := Dissemination{Rank: 1, Size: 5}
	require.Equal(t, 3, d.Rounds())
	require.Equal(t, []int{2, 3, 0}, []int{d.SendPeer(0), d.SendPeer(1), d.SendPeer(2)})
	require.Equal(t, []int{0, 4, 2}, []int{d.RecvPeer(0), d.RecvPeer(1), d.RecvPeer(2)})
	require.Equal(t, []int{1, 2, 1}, []int{d.AllgatherBlocks(0), d.AllgatherBlocks(1), d.AllgatherBlocks(2)})
	require.Zero(t, Dissemination{Rank: 0, Size: 1}.Rounds())
}

// TestDisseminationBarrier runs the barrier for every size 1..1024: each
// rank sends all it has heard of to its SendPeer, whose RecvPeer must be
// this rank. After round k every rank must have heard of exactly
// min(n, 2^(k+1)) ranks, itself included, so the barrier is complete after
// Rounds() rounds and not one round sooner; Rounds() must be ceil(log2 n).
func TestDisseminationBarrier(t *testing.T) {
	t.Parallel()
	const words = maxSize / 64
	heard := make([]uint64, maxSize*words) // bit q of heard[r*words:]: rank r has heard from rank q
	prev := make([]uint64, maxSize*words)
	eachSize(t, func(t *testing.T, n int) {
		rounds := Dissemination{Rank: 0, Size: n}.Rounds()
		require.Equal(t, ceilLog2Loop(n), rounds, "rounds")
		clear(heard[:n*words])
		for r := range n {
			heard[r*words+r/64] |= 1 << (r % 64)
		}
		for k := range rounds {
			copy(prev[:n*words], heard[:n*words])
			for r := range n {
				d := Dissemination{Rank: r, Size: n}
				to := d.SendPeer(k)
				if to < 0 || to >= n || to == r || (Dissemination{Rank: to, Size: n}).RecvPeer(k) != r {
					require.Failf(t, "peers disagree", "round %d: rank %d sends to %d, which receives from %d", k, r, to, Dissemination{Rank: to, Size: n}.RecvPeer(k))
				}
				for i := range words {
					heard[to*words+i] |= prev[r*words+i]
				}
			}
			want := min(n, 1<<(k+1))
			for r := range n {
				got := 0
				for _, x := range heard[r*words : (r+1)*words] {
					got += bits.OnesCount64(x)
				}
				if got != want {
					require.Failf(t, "barrier spread", "after round %d rank %d has heard of %d ranks, want %d", k, r, got, want)
				}
			}
		}
	})
}

// TestBruckAllgather runs the Bruck allgather over the dissemination peers
// for the sizes of eachSimSize: in round k each rank sends the first
// AllgatherBlocks(k) blocks of its list to SendPeer(k), which appends them.
// Every rank must end with every block exactly once, in the documented
// order: its own, then Rank-1, Rank-2, ... (mod n).
func TestBruckAllgather(t *testing.T) {
	t.Parallel()
	list := make([]int32, maxSize*maxSize) // list[r*n:]: rank r's blocks, in order
	length := make([]int, maxSize)
	seen := make([]int, maxSize)
	eachSimSize(t, func(t *testing.T, n int) {
		for r := range n {
			list[r*n] = int32(r)
			length[r] = 1
		}
		for k := range (Dissemination{Rank: 0, Size: n}).Rounds() {
			before := length[0]
			for r := range n {
				if length[r] != before {
					require.Failf(t, "ranks out of step", "round %d: rank %d holds %d blocks, rank 0 %d", k, r, length[r], before)
				}
			}
			for r := range n {
				d := Dissemination{Rank: r, Size: n}
				cnt, to := d.AllgatherBlocks(k), d.SendPeer(k)
				if cnt < 1 || cnt > before || length[to]+cnt > n {
					require.Failf(t, "bad block count", "round %d: rank %d holds %d blocks and sends %d to rank %d, which holds %d", k, r, before, cnt, to, length[to])
				}
				// Appending past position before never touches the prefix
				// any rank sends this round.
				copy(list[to*n+length[to]:], list[r*n:r*n+cnt])
				length[to] += cnt
			}
		}
		for r := range n {
			if length[r] != n {
				require.Failf(t, "allgather incomplete", "rank %d ends with %d of %d blocks", r, length[r], n)
			}
			for j, b := range list[r*n : r*n+n] {
				want := r - j
				if want < 0 {
					want += n
				}
				if seen[b] == n*maxSize+r+1 || int(b) != want {
					require.Failf(t, "block order", "rank %d has block %d at position %d, want %d", r, b, j, want)
				}
				seen[b] = n*maxSize + r + 1 // a stamp unique to (n, r): no clearing needed
			}
		}
	})
}

func TestPairwiseKnown(t *testing.T) {
	p := Pairwise{Rank: 1, Size: 4}
	require.Equal(t, 3, p.Steps())
	require.Equal(t, []int{2, 3, 0}, []int{p.SendPeer(1), p.SendPeer(2), p.SendPeer(3)})
	require.Equal(t, []int{0, 3, 2}, []int{p.RecvPeer(1), p.RecvPeer(2), p.RecvPeer(3)})
}

// TestPairwise checks the all-to-all exchange for the sizes of
// eachSimSize: over its Steps() = n-1 steps each rank sends to every other
// rank once, and at every step the rank it sends to receives from it. That also covers the
// receiving side: at each step the send map is then one-to-one with
// RecvPeer as its inverse, so rank r receives from q exactly at the one
// step q sends to r.
func TestPairwise(t *testing.T) {
	t.Parallel()
	sentTo := make([]int, maxSize) // sentTo[q] == stamp: this rank already sent to q
	stamp := 0
	eachSimSize(t, func(t *testing.T, n int) {
		require.Equal(t, n-1, Pairwise{Rank: 0, Size: n}.Steps())
		for r := range n {
			stamp++
			sentTo[r] = stamp // sending to itself counts as a repeat
			p := Pairwise{Rank: r, Size: n}
			for i := 1; i < n; i++ {
				to := p.SendPeer(i)
				if uint(to) >= uint(n) || sentTo[to] == stamp || (Pairwise{Rank: to, Size: n}).RecvPeer(i) != r {
					pairwiseFailure(t, n, r, i)
				}
				sentTo[to] = stamp
			}
		}
	})
}

func pairwiseFailure(t *testing.T, n, r, i int) {
	t.Helper()
	to := Pairwise{Rank: r, Size: n}.SendPeer(i)
	require.Failf(t, "bad send", "step %d: rank %d sends to %d, which receives from %d (or was sent to at an earlier step)",
		i, r, to, Pairwise{Rank: to % n, Size: n}.RecvPeer(i))
}
