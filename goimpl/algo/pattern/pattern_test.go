package pattern

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxSize is the largest group size every property is checked for.
const maxSize = 1024

// fullSweep makes the whole-schedule simulations that cost n*n per size
// (ring allgather, pairwise, Bruck) run for every size up to maxSize as
// well; see eachSimSize.
var fullSweep = flag.Bool("pattern.full", false, "run every n*n schedule simulation for every size 1..1024 (about 3x the CPU time)")

// eachSize runs f as a subtest for every group size 1..maxSize.
func eachSize(t *testing.T, f func(t *testing.T, n int)) {
	t.Helper()
	for n := 1; n <= maxSize; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) { f(t, n) })
	}
}

// eachSimSize runs f for the sizes an n*n simulation covers by default:
// every size up to 256, then the sizes around each multiple of 64 and a few
// primes, where off-by-one and wrap-around mistakes show. Sweeping all of
// 1..1024 costs as much as the rest of the package put together on a
// 2-core machine; -pattern.full does it. The ring reduce-scatter
// simulation, and every structural check, always takes every size.
func eachSimSize(t *testing.T, f func(t *testing.T, n int)) {
	t.Helper()
	primes := []int{257, 331, 509, 719, 997, 1021}
	for n := 1; n <= maxSize; n++ {
		if *fullSweep || n <= 256 || n%64 <= 1 || n%64 == 63 || slices.Contains(primes, n) {
			t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) { f(t, n) })
		}
	}
}

// rootsFor returns the roots to try for size n: all of them for small groups,
// otherwise the first, the second, one in the middle and the last.
func rootsFor(n int) []int {
	if n <= 64 {
		roots := make([]int, n)
		for i := range roots {
			roots[i] = i
		}
		return roots
	}
	return []int{0, 1, n / 2, n - 1}
}

// ceilLog2Loop is ceil(log2 n) by definition: the fewest doublings from 1
// that reach n. It is the lower bound on rounds for anything that spreads
// from (or gathers into) one rank when each rank talks to one peer a round.
func ceilLog2Loop(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// identity returns 0..n-1.
func identity(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// rankWeights returns a random weight per rank: fingerprints of reduced
// values are contribution counts plus wrapping sums of these weights, so a
// missing, duplicated or foreign contribution changes the fingerprint (the
// sum with overwhelming probability).
func rankWeights(n int) []uint64 {
	rng := rand.New(rand.NewPCG(uint64(n), 0x9e3779b97f4a7c15))
	w := make([]uint64, n)
	for i := range w {
		w[i] = rng.Uint64()
	}
	return w
}

// checkSpanningTree checks that parent and children describe one tree
// spanning ranks 0..n-1: exactly one rank has parent -1, every child lists
// its parent back, every non-root is someone's child exactly once, and a
// walk from the root reaches every rank. It returns the root, the ranks in
// breadth-first order (parents before children), and each rank's depth.
func checkSpanningTree(t *testing.T, n int, parent []int, children [][]int) (root int, order, depth []int) {
	t.Helper()
	root = -1
	childOf := make([]int, n) // how many ranks list r as a child
	for r := range n {
		switch p := parent[r]; {
		case p == -1:
			if root != -1 {
				require.Failf(t, "two roots", "ranks %d and %d both have no parent", root, r)
			}
			root = r
		case p < 0 || p >= n || p == r:
			require.Failf(t, "bad parent", "rank %d has parent %d", r, p)
		}
		for _, c := range children[r] {
			if c < 0 || c >= n {
				require.Failf(t, "bad child", "rank %d has child %d", r, c)
			}
			if parent[c] != r {
				require.Failf(t, "inconsistent tree", "rank %d lists child %d, whose parent is %d", r, c, parent[c])
			}
			childOf[c]++
		}
	}
	require.NotEqual(t, -1, root, "no rank is the root")
	for r := range n {
		want := 1
		if r == root {
			want = 0
		}
		if childOf[r] != want {
			require.Failf(t, "inconsistent tree", "rank %d is listed as a child %d times, want %d", r, childOf[r], want)
		}
	}
	depth = make([]int, n)
	order = append(make([]int, 0, n), root)
	for i := 0; i < len(order); i++ {
		r := order[i]
		for _, c := range children[r] {
			depth[c] = depth[r] + 1
			order = append(order, c)
		}
	}
	// With every non-root listed exactly once as a child, a walk that stops
	// short of n ranks means some ranks form a cycle away from the root.
	require.Len(t, order, n, "the tree from root %d does not reach every rank", root)
	return root, order, depth
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"ring ok", Ring{Rank: 3, Size: 4}.Validate(), nil},
		{"ring size 0", Ring{Rank: 0, Size: 0}.Validate(), ErrSize},
		{"ring rank high", Ring{Rank: 4, Size: 4}.Validate(), ErrRank},
		{"ring rank negative", Ring{Rank: -1, Size: 4}.Validate(), ErrRank},
		{"chain ok", Chain{Rank: 0, Size: 1, Root: 0}.Validate(), nil},
		{"chain root high", Chain{Rank: 0, Size: 3, Root: 3}.Validate(), ErrRank},
		{"binomial ok", Binomial{Rank: 2, Size: 5, Root: 4}.Validate(), nil},
		{"binomial root negative", Binomial{Rank: 2, Size: 5, Root: -1}.Validate(), ErrRank},
		{"binary tree size negative", BinaryTree{Rank: 0, Size: -2}.Validate(), ErrSize},
		{"double tree ok", DoubleTree{Rank: 6, Size: 7}.Validate(), nil},
		{"double tree rank high", DoubleTree{Rank: 7, Size: 7}.Validate(), ErrRank},
		{"halving-doubling ok", HalvingDoubling{Rank: 5, Size: 6}.Validate(), nil},
		{"dissemination rank high", Dissemination{Rank: 9, Size: 2}.Validate(), ErrRank},
		{"pairwise size 0", Pairwise{Rank: 0, Size: 0}.Validate(), ErrSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == nil {
				require.NoError(t, tc.err)
				return
			}
			require.ErrorIs(t, tc.err, tc.want)
		})
	}
	require.EqualError(t, Binomial{Rank: 2, Size: 5, Root: 7}.Validate(),
		"pattern: rank out of range: root 7 is not in [0, 5)")
}
