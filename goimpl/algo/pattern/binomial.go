package pattern

import "math/bits"

// Binomial is rank Rank's view of the binomial tree over Size ranks rooted at
// Root, for any Size (not only powers of two).
//
// The tree is defined on virtual ranks v = Rank-Root (mod Size), so the root
// is v = 0. The parent of v > 0 is v with its lowest set bit cleared; the
// children of v are v+2^k for every 2^k below v's lowest set bit (every 2^k
// for the root) with v+2^k < Size. The subtree of v is the contiguous run of
// virtual ranks [v, v+SubtreeSize()), which is what a binomial gather or
// scatter relies on. Every subtree is itself a binomial tree, and a broadcast
// or reduce over the whole tree takes Rounds() = ceil(log2 Size) rounds when
// children are served in the orders Children and ReduceChildren give.
type Binomial struct {
	Rank, Size, Root int
}

// Validate reports whether b describes a rank and root in a non-empty group.
func (b Binomial) Validate() error {
	return validate(b.Size, rankRootName, b.Rank, b.Root)
}

// VirtualRank returns this rank's virtual rank: its distance from Root,
// Rank-Root (mod Size).
func (b Binomial) VirtualRank() int {
	v := b.Rank - b.Root
	if v < 0 {
		v += b.Size
	}
	return v
}

// RealRank returns the rank whose virtual rank is v, 0 <= v < Size.
func (b Binomial) RealRank(v int) int {
	r := v + b.Root
	if r >= b.Size {
		r -= b.Size
	}
	return r
}

// Rounds returns the number of rounds of a binomial broadcast or reduce over
// Size ranks: ceil(log2 Size), 0 for a single rank.
func (b Binomial) Rounds() int {
	return ceilLog2(b.Size)
}

// Parent returns the rank this rank receives a broadcast from (and sends its
// reduced subtree to), or -1 at Root.
func (b Binomial) Parent() int {
	v := b.VirtualRank()
	if v == 0 {
		return -1
	}
	return b.RealRank(v &^ lowBit(v))
}

// Depth returns this rank's distance from Root in edges: the number of set
// bits of its virtual rank.
func (b Binomial) Depth() int {
	return bits.OnesCount(uint(b.VirtualRank()))
}

// SubtreeSize returns the number of ranks in this rank's subtree, itself
// included: Size at Root, otherwise min(lowest set bit of v, Size-v).
func (b Binomial) SubtreeSize() int {
	v := b.VirtualRank()
	if v == 0 {
		return b.Size
	}
	return min(lowBit(v), b.Size-v)
}

// span returns the bound below which child offsets 2^k lie: the lowest set
// bit of v, or for the root the first power of two >= Size.
func (b Binomial) span(v int) int {
	if v == 0 {
		return 1 << ceilLog2(b.Size)
	}
	return lowBit(v)
}

// NumChildren returns the number of children of this rank.
func (b Binomial) NumChildren() int {
	v := b.VirtualRank()
	n := 0
	for d := 1; d < b.span(v) && v+d < b.Size; d <<= 1 {
		n++
	}
	return n
}

// Children appends this rank's children to dst in the order a broadcast
// should send to them, largest subtree first, and returns the extended
// slice. With room in dst it does not allocate.
//
// Children at offsets 2^k from this rank have subtrees of 2^k ranks, except
// the farthest one, whose subtree is cut short by the end of the group. So
// the order is by decreasing offset, with the farthest child moved back to
// its place by size (ahead of a child of equal size): the stable sort of
// "farthest first" by decreasing subtree size.
func (b Binomial) Children(dst []int) []int {
	v := b.VirtualRank()
	// d walks the offsets 2^k from the largest present one down.
	d := b.span(v) >> 1
	for d >= 1 && v+d >= b.Size {
		d >>= 1
	}
	if d < 1 {
		return dst
	}
	far, farSize := v+d, min(d, b.Size-v-d)
	placed := false
	for d >>= 1; d >= 1; d >>= 1 {
		if !placed && farSize >= d {
			dst = append(dst, b.RealRank(far))
			placed = true
		}
		dst = append(dst, b.RealRank(v+d))
	}
	if !placed {
		dst = append(dst, b.RealRank(far))
	}
	return dst
}

// ReduceChildren appends this rank's children to dst in the order a reduce
// should receive from them, smallest subtree first (the reverse of
// Children), since small subtrees finish their own reduce first. With room
// in dst it does not allocate.
func (b Binomial) ReduceChildren(dst []int) []int {
	start := len(dst)
	dst = b.Children(dst)
	for i, j := start, len(dst)-1; i < j; i, j = i+1, j-1 {
		dst[i], dst[j] = dst[j], dst[i]
	}
	return dst
}
