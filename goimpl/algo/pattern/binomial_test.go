package pattern

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBinomialKnown(t *testing.T) {
	cases := []struct {
		size, root, rank int
		parent           int
		children         []int // broadcast order
		subtree          int
	}{
		{1, 0, 0, -1, nil, 1},
		{8, 0, 0, -1, []int{4, 2, 1}, 8},
		{8, 0, 6, 4, []int{7}, 2},
		{5, 0, 0, -1, []int{2, 4, 1}, 5}, // rank 4's subtree has 1 rank, rank 2's has 2
		{6, 0, 0, -1, []int{4, 2, 1}, 6}, // ranks 4 and 2 both have 2: the farther first
		{8, 3, 3, -1, []int{7, 5, 4}, 8}, // virtual rank v is rank v+3 mod 8
		{8, 3, 1, 7, []int{2}, 2},        // rank 1 is virtual 6
		{7, 2, 1, 6, nil, 1},             // rank 1 is virtual 6; its parent, virtual 4, is rank 6
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("size %d root %d rank %d", tc.size, tc.root, tc.rank), func(t *testing.T) {
			b := Binomial{Rank: tc.rank, Size: tc.size, Root: tc.root}
			require.Equal(t, tc.parent, b.Parent())
			require.Equal(t, tc.children, b.Children(nil))
			require.Equal(t, tc.subtree, b.SubtreeSize())
		})
	}
}

// TestBinomial checks the binomial tree for every size 1..1024 (every root
// up to 64 ranks, four roots above): it spans the group, parent and children
// agree, subtree sizes add up and cover consecutive virtual ranks, children
// come largest subtree first for a broadcast and smallest first for a
// reduce, and both finish in ceil(log2 n) rounds, the fewest possible with
// one transfer per rank per round.
func TestBinomial(t *testing.T) {
	t.Parallel()
	eachSize(t, func(t *testing.T, n int) {
		rounds := ceilLog2Loop(n)
		parent := make([]int, n)
		children := make([][]int, n)
		reduceChildren := make([][]int, n)
		sizes := make([]int, n)
		for _, root := range rootsFor(n) {
			for r := range n {
				b := Binomial{Rank: r, Size: n, Root: root}
				parent[r] = b.Parent()
				children[r] = b.Children(children[r][:0])
				reduceChildren[r] = b.ReduceChildren(reduceChildren[r][:0])
				if b.NumChildren() != len(children[r]) {
					require.Failf(t, "child count", "root %d: rank %d has %d children but NumChildren says %d", root, r, len(children[r]), b.NumChildren())
				}
				if b.RealRank(b.VirtualRank()) != r {
					require.Failf(t, "virtual rank", "root %d: rank %d has virtual rank %d, which maps back to %d", root, r, b.VirtualRank(), b.RealRank(b.VirtualRank()))
				}
				if !slices.Equal(reduceChildren[r], reversed(children[r])) {
					require.Failf(t, "reduce order", "root %d: rank %d reduces from %v, broadcasts to %v", root, r, reduceChildren[r], children[r])
				}
				sizes[r] = b.SubtreeSize()
			}
			gotRoot, order, depth := checkSpanningTree(t, n, parent, children)
			require.Equal(t, root, gotRoot)
			require.Equal(t, 0, Binomial{Rank: root, Size: n, Root: root}.VirtualRank())
			require.Equal(t, rounds, Binomial{Rank: root, Size: n, Root: root}.Rounds())

			// Subtree sizes, bottom up; each subtree must be the run of
			// virtual ranks [v, v+size).
			sum := make([]int, n)
			last := make([]int, n) // the largest virtual rank in the subtree
			for i := n - 1; i >= 0; i-- {
				r := order[i]
				v := Binomial{Rank: r, Size: n, Root: root}.VirtualRank()
				sum[r]++
				last[r] = max(last[r], v)
				if p := parent[r]; p >= 0 {
					sum[p] += sum[r]
					last[p] = max(last[p], last[r])
				}
				if d := (Binomial{Rank: r, Size: n, Root: root}).Depth(); d != depth[r] {
					require.Failf(t, "depth", "root %d: rank %d is %d edges from the root, Depth says %d", root, r, depth[r], d)
				}
			}
			require.Equal(t, sum, sizes, "root %d: SubtreeSize against counted subtrees", root)
			for r := range n {
				if v := (Binomial{Rank: r, Size: n, Root: root}).VirtualRank(); last[r] != v+sizes[r]-1 {
					require.Failf(t, "subtree not contiguous", "root %d: rank %d (virtual %d) has %d ranks below it reaching virtual rank %d", root, r, v, sizes[r], last[r])
				}
				for i := 1; i < len(children[r]); i++ {
					if sizes[children[r][i]] > sizes[children[r][i-1]] {
						require.Failf(t, "broadcast order", "root %d: rank %d sends to %v, subtree sizes not decreasing", root, r, children[r])
					}
				}
			}
			require.LessOrEqual(t, slices.Max(depth), rounds, "root %d: tree depth", root)

			// Broadcast: the root has the data at time 0; a rank that has it
			// at time x sends to its i-th child in round x+i+1.
			have := make([]int, n)
			for _, r := range order {
				for i, c := range children[r] {
					have[c] = have[r] + i + 1
				}
			}
			require.Equal(t, rounds, slices.Max(have), "root %d: broadcast rounds", root)

			// Reduce: a rank takes one child's result per round, in
			// ReduceChildren order, each no earlier than that child is done.
			done := make([]int, n)
			for i := n - 1; i >= 0; i-- {
				r := order[i]
				x := 0
				for _, c := range reduceChildren[r] {
					x = max(x, done[c]) + 1
				}
				done[r] = x
			}
			require.Equal(t, rounds, done[root], "root %d: reduce rounds", root)
		}
	})
}

func reversed(s []int) []int {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}
