package pattern

import "math/bits"

// inorderParent returns the parent of position x in the in-order tree over
// 1..m (defined at BinaryTree), or 0 at the root. A position x with lowest
// set bit b is a left child when bit 2b of x is clear; its parent is then
// x+b, unless that is past m, in which case x hangs as the right child of
// x-b (whose right child search, in inorderChildren, stops at x because
// x+b > m). The root, the largest power of two <= m, comes out as 0.
func inorderParent(x, m int) int {
	b := lowBit(x)
	if x&(2*b) == 0 && x+b <= m {
		return x + b
	}
	return x - b
}

// inorderChildren returns the children of position x in the in-order tree
// over 1..m (defined at BinaryTree), 0 for an absent child.
func inorderChildren(x, m int) (left, right int) {
	b := lowBit(x)
	if b == 1 {
		return 0, 0
	}
	left = x - b/2
	if room := min(b/2, m-x); room >= 1 {
		right = x + 1<<(bits.Len(uint(room))-1)
	}
	return left, right
}

// BinaryTree is rank Rank's view of a binary tree spanning Size ranks, the
// tree a pipelined tree allreduce reduces up and broadcasts down. It is tree
// 0 of DoubleTree.
//
// The shape is the in-order tree over positions 1..m (m = Size). Position x
// with lowest set bit b is a leaf when x is odd; otherwise its left child
// is x-b/2 and its right child is x+c for the largest power of two
// c <= b/2 with x+c <= m (none when x = m). The root is the largest power
// of two <= m. Each level halves the lowest set bit, so the depth is
// floor(log2 m), and the interior positions are exactly the even ones, each
// with two children except position m when m is even, which has only a left
// child.
//
// Rank r sits at position r+1, so odd ranks are interior and even ranks
// are leaves, and the root is rank 2^k-1 for the largest 2^k <= Size.
type BinaryTree struct {
	Rank, Size int
}

// Validate reports whether t describes a rank in a non-empty group.
func (t BinaryTree) Validate() error {
	return validate(t.Size, rankName, t.Rank)
}

// Root returns the root rank of the tree.
func (t BinaryTree) Root() int {
	return floorPow2(t.Size) - 1
}

// Parent returns this rank's parent, or -1 at the root.
func (t BinaryTree) Parent() int {
	return inorderParent(t.Rank+1, t.Size) - 1
}

// Children returns this rank's children, at most two, padded with -1: the
// left child (whose subtree is at least as large) first. The subtrees hold
// consecutive ranks, the left one below Rank and the right one above.
func (t BinaryTree) Children() [2]int {
	l, r := inorderChildren(t.Rank+1, t.Size)
	return [2]int{l - 1, r - 1}
}

// DoubleTree is rank Rank's view of the two complementary binary trees over
// Size ranks that a double binary tree allreduce uses, each carrying half of
// the data: a rank that is interior (has children) in one tree is a leaf in
// the other, so no rank forwards more than one tree's traffic, and each tree
// has depth floor(log2 Size).
//
// Both trees are the in-order tree over positions 1..Size described at
// BinaryTree, whose interior positions are the even ones. Tree 0
// puts rank r at position r+1, so its interior ranks are the odd ones. Tree
// 1 must make the even ranks interior instead:
//   - Size even: mirror, rank r at position Size-r. Every rank is interior in
//     exactly one tree, the least possible interior count for both.
//   - Size odd: mirroring would map odd ranks to even positions again, so
//     shift instead: rank r at position r, rank 0 at position Size. Ranks
//     2, 4, ... are interior in tree 1 and rank 0 is a leaf in both, the one
//     rank to spare when Size is odd.
//
// This differs from NCCL's tree, whose extra root above the in-order tree
// leaves one rank interior in both trees when Size is odd.
type DoubleTree struct {
	Rank, Size int
}

// Validate reports whether d describes a rank in a non-empty group.
func (d DoubleTree) Validate() error {
	return validate(d.Size, rankName, d.Rank)
}

// position returns where rank r sits in tree t.
func (d DoubleTree) position(t, r int) int {
	switch {
	case t == 0:
		return r + 1
	case d.Size%2 == 0:
		return d.Size - r
	case r == 0:
		return d.Size
	default:
		return r
	}
}

// rank returns the rank at position x of tree t, or -1 for position 0 (no
// such node).
func (d DoubleTree) rank(t, x int) int {
	switch {
	case x == 0:
		return -1
	case t == 0:
		return x - 1
	case d.Size%2 == 0:
		return d.Size - x
	case x == d.Size:
		return 0
	default:
		return x
	}
}

// Root returns the root rank of tree t, t in {0, 1}.
func (d DoubleTree) Root(t int) int {
	return d.rank(t, floorPow2(d.Size))
}

// Parent returns this rank's parent in tree t, or -1 at that tree's root.
func (d DoubleTree) Parent(t int) int {
	return d.rank(t, inorderParent(d.position(t, d.Rank), d.Size))
}

// Children returns this rank's children in tree t, at most two, padded with
// -1; the child with the larger subtree first.
func (d DoubleTree) Children(t int) [2]int {
	l, r := inorderChildren(d.position(t, d.Rank), d.Size)
	return [2]int{d.rank(t, l), d.rank(t, r)}
}

// Interior returns the tree, 0 or 1, in which this rank has children, or -1
// if it is a leaf in both.
func (d DoubleTree) Interior() int {
	for t := range 2 {
		if lowBit(d.position(t, d.Rank)) > 1 {
			return t
		}
	}
	return -1
}
