package pattern

import (
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRingSchedule pins the chunk conventions on one small ring, so a change
// that keeps the properties but moves the chunks shows up here.
func TestRingSchedule(t *testing.T) {
	cases := []struct {
		rank, next, prev int
		rsSend, rsRecv   []int
		agSend, agRecv   []int
	}{
		{0, 1, 3, []int{3, 2, 1}, []int{2, 1, 0}, []int{0, 3, 2}, []int{3, 2, 1}},
		{1, 2, 0, []int{0, 3, 2}, []int{3, 2, 1}, []int{1, 0, 3}, []int{0, 3, 2}},
		{3, 0, 2, []int{2, 1, 0}, []int{1, 0, 3}, []int{3, 2, 1}, []int{2, 1, 0}},
	}
	for _, tc := range cases {
		r := Ring{Rank: tc.rank, Size: 4}
		require.Equal(t, tc.next, r.Next(), "rank %d next", tc.rank)
		require.Equal(t, tc.prev, r.Prev(), "rank %d prev", tc.rank)
		require.Equal(t, 3, r.Steps())
		for s := range r.Steps() {
			require.Equal(t, tc.rsSend[s], r.RSSendChunk(s), "rank %d reduce-scatter send, step %d", tc.rank, s)
			require.Equal(t, tc.rsRecv[s], r.RSRecvChunk(s), "rank %d reduce-scatter recv, step %d", tc.rank, s)
			require.Equal(t, tc.agSend[s], r.AGSendChunk(s), "rank %d allgather send, step %d", tc.rank, s)
			require.Equal(t, tc.agRecv[s], r.AGRecvChunk(s), "rank %d allgather recv, step %d", tc.rank, s)
		}
	}
}

func TestRingNeighbours(t *testing.T) {
	t.Parallel()
	eachSize(t, func(t *testing.T, n int) {
		nextOfPrev, prevOfNext := make([]int, n), make([]int, n)
		for r := range n {
			ring := Ring{Rank: r, Size: n}
			nextOfPrev[r] = Ring{Rank: ring.Prev(), Size: n}.Next()
			prevOfNext[r] = Ring{Rank: ring.Next(), Size: n}.Prev()
		}
		require.Equal(t, identity(n), nextOfPrev, "Next(Prev(r)) != r")
		require.Equal(t, identity(n), prevOfNext, "Prev(Next(r)) != r")

		// Following Next from 0 must visit every rank once before coming
		// back: one cycle, not several.
		seen := make([]bool, n)
		r := 0
		for range n {
			require.False(t, seen[r], "rank %d visited twice before the ring closes", r)
			seen[r] = true
			r = Ring{Rank: r, Size: n}.Next()
		}
		require.Equal(t, 0, r, "the ring does not close after %d steps", n)
	})
}

// diagonal returns where rank r's state for chunk c lives in a simulation
// over n ranks: row (r-c) mod n, column r. Any one-to-one layout gives the
// same results; this one puts the chunks that all ranks touch in one ring
// step side by side, which keeps the sweep to n = 1024 within the time
// budget.
func diagonal(r, c, n int) (row, col int) {
	d := r - c
	if d < 0 {
		d += n
	}
	return d, r
}

// ringMismatch reports a step at which the chunk rank from sends is not
// the one the next rank, to, expects.
func ringMismatch(t *testing.T, s int, from, to Ring, send, recv func(Ring, int) int) {
	t.Helper()
	require.Failf(t, "schedule mismatch", "step %d: rank %d sends chunk %d; rank %d receives chunk %d",
		s, from.Rank, send(from, s), to.Rank, recv(to, s))
}

// TestRingReduceScatter runs the reduce-scatter schedule on every rank at
// once, with a fingerprint for each value (a contribution count and a sum
// of random per-rank weights), and checks that each rank ends with exactly one
// fully reduced chunk: its own.
func TestRingReduceScatter(t *testing.T) {
	t.Parallel()
	// A fingerprint here is one uint32: the contribution count in the low
	// countBits bits and a 21-bit sum of random weights above them, so
	// reducing is one wrapping add (n <= 1024 keeps the count from carrying
	// into the sum). acc holds what each rank has reduced into its copy of
	// each chunk from other ranks, laid out by diagonal; a row whose
	// rowSize is not the current n is stale and reads as zero, and is
	// cleared when first written.
	const countBits = 11
	acc := make([]uint32, maxSize*maxSize)
	rowSize := make([]int, maxSize)
	msg := make([]uint32, maxSize) // msg[r]: the chunk on its way to rank r
	msgChunk := make([]int, maxSize)
	eachSize(t, func(t *testing.T, n int) {
		w, full := make([]uint32, n), uint32(0)
		for r, x := range rankWeights(n) {
			w[r] = 1 | uint32(x)<<countBits
			full += w[r]
		}
		complete := make([]int, n) // complete[r]: how many chunks rank r holds fully reduced
		require.Equal(t, n-1, Ring{Rank: 0, Size: n}.Steps())
		for s := range n - 1 {
			for r := range n {
				ring := Ring{Rank: r, Size: n}
				c := ring.RSSendChunk(s)
				if uint(c) >= uint(n) {
					ringMismatch(t, s, ring, Ring{Rank: ring.Next(), Size: n}, Ring.RSSendChunk, Ring.RSRecvChunk)
				}
				m := w[r]
				if row, col := diagonal(r, c, n); rowSize[row] == n {
					m += acc[row*n+col]
				}
				msg[ring.Next()], msgChunk[ring.Next()] = m, c
			}
			for r := range n {
				ring := Ring{Rank: r, Size: n}
				c := ring.RSRecvChunk(s)
				if c != msgChunk[r] {
					ringMismatch(t, s, Ring{Rank: ring.Prev(), Size: n}, ring, Ring.RSSendChunk, Ring.RSRecvChunk)
				}
				row, col := diagonal(r, c, n)
				if rowSize[row] != n {
					clear(acc[row*n : row*n+n])
					rowSize[row] = n
				}
				acc[row*n+col] += msg[r]
				if f := acc[row*n+col] + w[r]; f&(1<<countBits-1) >= uint32(n) {
					if f != full {
						require.Failf(t, "wrong reduction", "step %d: rank %d chunk %d has %d contributions from %d ranks, not one from each", s, r, c, f&(1<<countBits-1), n)
					}
					complete[r]++
				}
			}
		}
		if n == 1 {
			complete[0] = 1 // nothing to reduce: the one chunk is complete from the start
		}
		ones := make([]int, n)
		for r := range n {
			row, col := diagonal(r, r, n)
			if n > 1 && (rowSize[row] != n || acc[row*n+col]+w[r] != full) {
				require.Failf(t, "chunk not reduced", "rank %d ends without chunk %d fully reduced", r, r)
			}
			ones[r] = 1
		}
		require.Equal(t, ones, complete, "fully reduced chunks per rank: each must hold exactly one")
	})
}

// TestRingAllgather runs the allgather schedule, for the sizes of
// eachSimSize, from "rank r owns chunk r", and checks that every transfer
// carries a chunk the sender has and the receiver lacks, and that every
// rank ends with every chunk.
func TestRingAllgather(t *testing.T) {
	t.Parallel()
	const words = maxSize / 64
	has := make([]uint64, maxSize*words) // rank r holds chunk c: see diagonal
	msgChunk := make([]int, maxSize)
	eachSimSize(t, func(t *testing.T, n int) {
		clear(has[:n*words])
		// bit returns the word and mask of "rank r holds chunk c".
		bit := func(r, c int) (*uint64, uint64) {
			row, col := diagonal(r, c, n)
			return &has[row*words+int(uint(col)/64)], 1 << (uint(col) % 64)
		}
		for r := range n {
			word, mask := bit(r, r)
			*word |= mask
		}
		for s := range n - 1 {
			for r := range n {
				ring := Ring{Rank: r, Size: n}
				c := ring.AGSendChunk(s)
				if uint(c) >= uint(n) {
					ringMismatch(t, s, ring, Ring{Rank: ring.Next(), Size: n}, Ring.AGSendChunk, Ring.AGRecvChunk)
				}
				if word, mask := bit(r, c); *word&mask == 0 {
					require.Failf(t, "send of a missing chunk", "step %d: rank %d sends chunk %d, which it does not hold", s, r, c)
				}
				msgChunk[ring.Next()] = c
			}
			for r := range n {
				ring := Ring{Rank: r, Size: n}
				c := ring.AGRecvChunk(s)
				if c != msgChunk[r] {
					ringMismatch(t, s, Ring{Rank: ring.Prev(), Size: n}, ring, Ring.AGSendChunk, Ring.AGRecvChunk)
				}
				word, mask := bit(r, c)
				if *word&mask != 0 {
					require.Failf(t, "wasted step", "step %d: rank %d receives chunk %d, which it already holds", s, r, c)
				}
				*word |= mask
			}
		}
		// Every step sets one new bit per rank and none twice, so n*n set
		// bits mean every rank holds every chunk.
		held := 0
		for _, x := range has[:n*words] {
			held += bits.OnesCount64(x)
		}
		require.Equal(t, n*n, held, "chunks held over all ranks after the allgather")
	})
}

func TestChain(t *testing.T) {
	t.Parallel()
	eachSize(t, func(t *testing.T, n int) {
		for _, root := range rootsFor(n) {
			require.Equal(t, 0, Chain{Rank: root, Size: n, Root: root}.Position(), "root %d position", root)
			require.Equal(t, -1, Chain{Rank: root, Size: n, Root: root}.Prev(), "root %d prev", root)
			// Walk from the root: positions count up, each Prev points back,
			// every rank comes once, and the walk ends with Next -1.
			seen := make([]bool, n)
			prev, r := -1, root
			for pos := range n {
				c := Chain{Rank: r, Size: n, Root: root}
				if seen[r] || c.Position() != pos || c.Prev() != prev || c.At(pos) != r {
					require.Failf(t, "broken chain", "root %d: rank %d at step %d has position %d, prev %d (want %d), At %d, seen before %v",
						root, r, pos, c.Position(), c.Prev(), prev, c.At(pos), seen[r])
				}
				seen[r] = true
				prev, r = r, c.Next()
			}
			require.Equal(t, -1, r, "root %d: the chain does not end after %d ranks", root, n)
		}
	})
}
