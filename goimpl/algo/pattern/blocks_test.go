package pattern

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlocksKnown(t *testing.T) {
	cases := []struct {
		count, parts int
		want         [][2]int // offset, length per block
	}{
		{10, 3, [][2]int{{0, 4}, {4, 3}, {7, 3}}},
		{2, 4, [][2]int{{0, 1}, {1, 1}, {2, 0}, {2, 0}}},
		{0, 3, [][2]int{{0, 0}, {0, 0}, {0, 0}}},
		{7, 1, [][2]int{{0, 7}}},
		{12, 4, [][2]int{{0, 3}, {3, 3}, {6, 3}, {9, 3}}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d/%d", tc.count, tc.parts), func(t *testing.T) {
			got := make([][2]int, tc.parts)
			for i := range got {
				got[i][0], got[i][1] = Blocks(tc.count, tc.parts, i)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestBlocksCover checks, for every number of parts 1..1024 and counts
// around it, that the blocks tile [0, count) in order, differ in length by
// at most one with the longer ones first, and that BlockSpan agrees with
// the blocks it spans.
func TestBlocksCover(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	eachSize(t, func(t *testing.T, parts int) {
		for _, count := range []int{0, 1, parts - 1, parts, parts + 1, 3*parts + 5, 1<<20 + 7} {
			offsets, lengths := make([]int, parts), make([]int, parts)
			end := 0
			for i := range parts {
				offsets[i], lengths[i] = Blocks(count, parts, i)
				if offsets[i] != end || lengths[i] < 0 {
					require.Failf(t, "blocks do not tile", "count %d, %d parts: block %d is (%d, %d) but the previous one ends at %d",
						count, parts, i, offsets[i], lengths[i], end)
				}
				end += lengths[i]
			}
			require.Equal(t, count, end, "count %d, %d parts: the blocks end short of count", count, parts)
			longer := 0
			for i := range parts {
				switch lengths[i] - lengths[parts-1] {
				case 0:
				case 1:
					if i != longer {
						require.Failf(t, "longer block after a shorter one", "count %d, %d parts: block %d", count, parts, i)
					}
					longer++
				default:
					require.Failf(t, "uneven blocks", "count %d, %d parts: block %d has %d elements, the last %d",
						count, parts, i, lengths[i], lengths[parts-1])
				}
			}
			require.Equal(t, count%parts, longer, "count %d, %d parts: number of longer blocks", count, parts)

			off, length := BlockSpan(count, parts, 0, parts)
			require.Equal(t, [2]int{0, count}, [2]int{off, length}, "span of all blocks")
			for range 8 {
				lo := rng.IntN(parts + 1)
				hi := lo + rng.IntN(parts+1-lo)
				want := [2]int{end, 0} // an empty span at the end of the blocks
				if lo < parts {
					want[0] = offsets[lo]
				}
				for i := lo; i < hi; i++ {
					want[1] += lengths[i]
				}
				off, length := BlockSpan(count, parts, lo, hi)
				require.Equal(t, want, [2]int{off, length}, "count %d, %d parts: span of blocks [%d, %d)", count, parts, lo, hi)
			}
		}
	})
}

func TestBlocksPanics(t *testing.T) {
	require.Panics(t, func() { Blocks(10, 0, 0) }, "no parts")
	require.Panics(t, func() { Blocks(10, 3, 3) }, "index past the last block")
	require.Panics(t, func() { Blocks(10, 3, -1) }, "negative index")
	require.Panics(t, func() { Blocks(-1, 3, 0) }, "negative count")
	require.Panics(t, func() { BlockSpan(10, 3, 2, 1) }, "lo after hi")
	require.Panics(t, func() { BlockSpan(10, 3, 0, 4) }, "hi past the end")
	require.NotPanics(t, func() { BlockSpan(10, 3, 3, 3) }, "empty span at the end")
}
