package pattern

import (
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDoubleTreeKnown(t *testing.T) {
	type node struct {
		parent   int
		children [2]int
	}
	none := [2]int{-1, -1}
	cases := []struct {
		size  int
		roots [2]int
		nodes map[[2]int]node // (tree, rank) -> node
	}{
		{1, [2]int{0, 0}, map[[2]int]node{{0, 0}: {-1, none}, {1, 0}: {-1, none}}},
		{2, [2]int{1, 0}, map[[2]int]node{
			{0, 1}: {-1, [2]int{0, -1}}, {0, 0}: {1, none},
			{1, 0}: {-1, [2]int{1, -1}}, {1, 1}: {0, none},
		}},
		{3, [2]int{1, 2}, map[[2]int]node{
			{0, 1}: {-1, [2]int{0, 2}},
			{1, 2}: {-1, [2]int{1, 0}}, {1, 0}: {2, none}, {1, 1}: {2, none},
		}},
		// Size 12, tree 0: positions 1..12 in-order, rank = position-1.
		// Root position 8 (rank 7) has children 4 and 12 (ranks 3, 11);
		// position 12 has only position 10 (rank 9). Tree 1 mirrors:
		// rank = 12-position, so the root is rank 4 with children 8 and 0.
		{12, [2]int{7, 4}, map[[2]int]node{
			{0, 7}: {-1, [2]int{3, 11}}, {0, 11}: {7, [2]int{9, -1}}, {0, 9}: {11, [2]int{8, 10}},
			{1, 4}: {-1, [2]int{8, 0}}, {1, 0}: {4, [2]int{2, -1}}, {1, 2}: {0, [2]int{3, 1}},
		}},
		// Size 13, tree 1 shifts: rank r at position r, rank 0 at 13.
		// Root position 8 is rank 8; position 12 (rank 12) has children 10
		// and 13 (rank 0), so rank 0 is a leaf in both trees.
		{13, [2]int{7, 8}, map[[2]int]node{
			{1, 8}: {-1, [2]int{4, 12}}, {1, 12}: {8, [2]int{10, 0}}, {1, 0}: {12, none},
			{0, 0}: {1, none},
		}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("size %d", tc.size), func(t *testing.T) {
			for tree := range 2 {
				require.Equal(t, tc.roots[tree], DoubleTree{Rank: 0, Size: tc.size}.Root(tree), "tree %d root", tree)
			}
			for k, want := range tc.nodes {
				d := DoubleTree{Rank: k[1], Size: tc.size}
				require.Equal(t, want, node{d.Parent(k[0]), d.Children(k[0])}, "tree %d rank %d", k[0], k[1])
			}
		})
	}
}

// binaryTreeShape reads one binary tree through its accessors and checks it
// is a spanning tree with at most two children per rank, children packed
// first, and depth floor(log2 n). It returns who has children.
func binaryTreeShape(t *testing.T, n, wantRoot int, node func(r int) (parent int, children [2]int)) (interior []bool) {
	t.Helper()
	parent := make([]int, n)
	children := make([][]int, n)
	interior = make([]bool, n)
	for r := range n {
		p, c := node(r)
		parent[r] = p
		switch {
		case c[0] == -1 && c[1] == -1:
		case c[0] != -1 && c[1] == -1:
			children[r] = c[:1]
		case c[0] != -1 && c[1] != -1 && c[0] != c[1]:
			children[r] = c[:]
		default:
			require.Failf(t, "bad children", "rank %d has children %v", r, c)
		}
		interior[r] = len(children[r]) > 0
	}
	root, _, depth := checkSpanningTree(t, n, parent, children)
	require.Equal(t, wantRoot, root, "Root against the rank without a parent")
	require.LessOrEqual(t, slices.Max(depth), bits.Len(uint(n))-1, "depth beyond floor(log2 %d)", n)
	return interior
}

// TestDoubleTree checks both trees for every size 1..1024: each spans the
// group with depth floor(log2 n), and no rank is interior in both. The
// interior counts are also as small as they can be: with at most two
// children a tree over n ranks needs ceil((n-1)/2) interior ranks, so when
// n is even every rank is interior in exactly one tree, and when n is odd
// exactly one rank is a leaf in both.
func TestDoubleTree(t *testing.T) {
	t.Parallel()
	eachSize(t, func(t *testing.T, n int) {
		var interior [2][]bool
		for tree := range 2 {
			root := DoubleTree{Rank: 0, Size: n}.Root(tree)
			interior[tree] = binaryTreeShape(t, n, root, func(r int) (int, [2]int) {
				d := DoubleTree{Rank: r, Size: n}
				return d.Parent(tree), d.Children(tree)
			})
		}
		leafInBoth := 0
		for r := range n {
			want := -1
			switch {
			case interior[0][r] && interior[1][r]:
				require.Failf(t, "interior in both trees", "rank %d has children in tree 0 and tree 1", r)
			case interior[0][r]:
				want = 0
			case interior[1][r]:
				want = 1
			default:
				leafInBoth++
			}
			require.Equal(t, want, DoubleTree{Rank: r, Size: n}.Interior(), "rank %d: Interior", r)
		}
		switch {
		case n == 1:
			require.Equal(t, 1, leafInBoth)
		case n%2 == 0:
			require.Zero(t, leafInBoth, "ranks that are leaves in both trees")
		default:
			require.Equal(t, 1, leafInBoth, "ranks that are leaves in both trees")
		}
	})
}

// TestBinaryTree checks the single tree for every size 1..1024 and that it
// is tree 0 of DoubleTree, as documented.
func TestBinaryTree(t *testing.T) {
	t.Parallel()
	eachSize(t, func(t *testing.T, n int) {
		binaryTreeShape(t, n, BinaryTree{Rank: 0, Size: n}.Root(), func(r int) (int, [2]int) {
			b := BinaryTree{Rank: r, Size: n}
			return b.Parent(), b.Children()
		})
		for r := range n {
			b, d := BinaryTree{Rank: r, Size: n}, DoubleTree{Rank: r, Size: n}
			if b.Parent() != d.Parent(0) || b.Children() != d.Children(0) || b.Root() != d.Root(0) {
				require.Failf(t, "BinaryTree is not tree 0", "rank %d: parent %d, children %v; tree 0: parent %d, children %v",
					r, b.Parent(), b.Children(), d.Parent(0), d.Children(0))
			}
		}
	})
}
