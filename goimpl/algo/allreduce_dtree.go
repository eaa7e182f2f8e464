package algo

import "github.com/gohccl/gohccl/goimpl/algo/pattern"

// AllReduceDoubleTree runs two pipelined tree all-reduces at once over the
// complementary trees of pattern.DoubleTree, tree t carrying half t of buf
// (pattern.Blocks(count, 2, t)). A rank interior in one tree is a leaf in
// the other, so each rank forwards only one tree's traffic and the two
// halves share the links evenly.
//
// The two trees advance in one loop, segment j of tree 0 then segment j of
// tree 1, up for every segment and then down for every segment. That order
// has no cycle: an item (segment, tree) waits only on the same item at a
// child (up) or parent (down), or on an earlier item of its own rank. Frames
// from one peer are posted in the order that peer sends them.
//
// 2*floor(log2 n) steps of latency plus the pipeline; each rank receives and
// sends about S going up and S coming down. Every rank ends with each tree
// root's bits, computed once and copied.
func AllReduceDoubleTree(o *Op, buf []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		return nil
	}
	d := pattern.DoubleTree{Rank: o.Rank(), Size: o.Size()}
	es, seg := o.esize(), o.Segment
	var half [2][]byte
	var parent [2]int
	var kids [2][2]int
	nseg := 0
	for t := range 2 {
		off, l := pattern.Blocks(count, 2, t)
		half[t] = buf[off*es : (off+l)*es]
		parent[t], kids[t] = d.Parent(t), d.Children(t)
		nseg = max(nseg, segments(len(half[t]), seg))
	}
	for j := 0; j < nseg; j++ {
		for t := range 2 {
			if j < segments(len(half[t]), seg) {
				mine := part(half[t], seg, j)
				if err := o.treeUp(t, j, mine, mine, parent[t], phaseTreeUp, kids[t]); err != nil {
					return err
				}
			}
		}
	}
	for j := 0; j < nseg; j++ {
		for t := range 2 {
			if j < segments(len(half[t]), seg) {
				if err := o.treeDown(t, j, part(half[t], seg, j), parent[t], kids[t]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
