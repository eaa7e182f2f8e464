package algo

import (
	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// dtreeAhead is how many segments the tree in which a rank is a leaf runs
// ahead of (up) or behind (down) the tree in which it forwards. The leaf
// tree's work never gates the interior tree's sends unless it falls this far
// behind; a larger value lets more early frames wait in the peer's stash
// (up) and needs more receive descriptors (down: dtreeAhead+2 in all).
const dtreeAhead = 4

// AllReduceDoubleTree runs two pipelined tree all-reduces at once over the
// complementary trees of pattern.DoubleTree, tree t carrying half t of buf
// (pattern.Blocks(count, 2, t)). A rank interior in one tree is a leaf in
// the other, so each rank forwards only one tree's traffic and the two
// halves share the links evenly.
//
// Terms: at a rank, the interior tree is the one where it has children
// (pattern.DoubleTree.Interior), the leaf tree the other. In the leaf tree a
// rank only sends its own segments up and receives the result's segments
// down; neither depends on the interior tree, so the schedule keeps the two
// apart and lets the leaf tree's frames wait on nothing of the interior
// tree's:
//
//   - up: the interior tree runs the pipelined tree's up steps (each child's
//     segment j+1 posted, into scratch slots 2i and 2i+1, before segment j is
//     awaited); before waiting for segment j, the rank has sent the leaf
//     tree's segments up to j+dtreeAhead;
//   - down: the interior tree's result streams from the parent straight into
//     buf (segment j+1 posted before segment j is forwarded); the leaf
//     tree's result segments are posted up to dtreeAhead ahead into buf and
//     awaited only when their descriptors are needed again, and at the end.
//
// Frames from one peer are posted in the order that peer sends them: a
// peer sends a rank the up frames of one tree and then the down frames of
// the other (its child in the first is its parent in the second), and the
// rank posts the down frames only after the up phase. There is no cycle: a
// send waits only on the same tree's segment at children (up) or the parent
// (down), or on the other tree's frames of segments at least dtreeAhead-1
// earlier. A rank that is a leaf in both trees (n odd) just sends both
// halves up and receives them back.
//
// 2*floor(log2 n) steps of latency plus the pipeline; each rank receives and
// sends about S going up and S coming down. Each element is reduced at each
// interior rank as own, left child, right child, and the roots' bits are
// copied to every rank, so every rank ends with the same bits.
func AllReduceDoubleTree(o *Op, buf []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		return nil
	}
	d := pattern.DoubleTree{Rank: o.Rank(), Size: o.Size()}
	es := o.esize()
	var half [2][]byte
	for t := range 2 {
		off, l := pattern.Blocks(count, 2, t)
		half[t] = buf[off*es : (off+l)*es]
	}
	in := d.Interior()
	if in < 0 {
		return o.dtreeLeafBoth(d, half)
	}
	lf := 1 - in
	if err := o.dtreeUp(in, half[in], d.Parent(in), d.Children(in), lf, half[lf], d.Parent(lf)); err != nil {
		return err
	}
	return o.dtreeDown(in, half[in], d.Parent(in), d.Children(in), lf, half[lf], d.Parent(lf))
}

// dtreeUp runs the up phase at a rank interior in tree in (parent, kids)
// and a leaf in tree lf, whose half goes to lfParent.
func (o *Op) dtreeUp(in int, mine []byte, parent int, kids [2]int, lf int, leaf []byte, lfParent int) error {
	seg := o.Segment
	nseg, nleaf := segments(len(mine), seg), segments(len(leaf), seg)
	sent := 0
	sendLeaf := func(upto int) error {
		for ; sent < min(upto, nleaf); sent++ {
			if err := o.send(lfParent, tag(phaseTreeUp, lf, sent), part(leaf, seg, sent)); err != nil {
				return err
			}
		}
		return nil
	}
	var pending [2][2]*transport.Recv // [child][segment parity]
	postUp := func(j int) {
		for i, c := range kids {
			if c >= 0 {
				k := 2*i + j%2
				pending[i][j%2] = o.post(k, c, tag(phaseTreeUp, in, j), o.slot(k)[:len(part(mine, seg, j))])
			}
		}
	}
	if nseg > 0 {
		postUp(0)
	}
	for j := 0; j < nseg; j++ {
		if err := sendLeaf(j + dtreeAhead); err != nil {
			return err
		}
		if j+1 < nseg {
			postUp(j + 1)
		}
		m := part(mine, seg, j)
		for i, c := range kids {
			if c < 0 {
				continue
			}
			r := pending[i][j%2]
			if err := o.wait(r); err != nil {
				return err
			}
			if i == 0 {
				o.Kernel3(m, m, r.Buf)
			} else {
				o.Kernel(m, r.Buf)
			}
		}
		if parent >= 0 {
			if err := o.send(parent, tag(phaseTreeUp, in, j), m); err != nil {
				return err
			}
		}
	}
	return sendLeaf(nleaf)
}

// dtreeDown runs the down phase at a rank interior in tree in and a leaf in
// tree lf. Descriptors 0 and 1 carry the interior tree's segments, 2.. the
// leaf tree's, in a ring of dtreeAhead.
func (o *Op) dtreeDown(in int, mine []byte, parent int, kids [2]int, lf int, leaf []byte, lfParent int) error {
	seg := o.Segment
	nseg, nleaf := segments(len(mine), seg), segments(len(leaf), seg)
	posted, waited := 0, 0
	// leafTo posts the leaf tree's segments below upto, first waiting for
	// the oldest when all dtreeAhead descriptors are in use.
	leafTo := func(upto int) error {
		for ; posted < min(upto, nleaf); posted++ {
			if posted-waited == dtreeAhead {
				if err := o.wait(&o.Recvs[2+waited%dtreeAhead]); err != nil {
					return err
				}
				waited++
			}
			o.post(2+posted%dtreeAhead, lfParent, tag(phaseTreeDown, lf, posted), part(leaf, seg, posted))
		}
		return nil
	}
	var pending [2]*transport.Recv
	if parent >= 0 && nseg > 0 {
		pending[0] = o.post(0, parent, tag(phaseTreeDown, in, 0), part(mine, seg, 0))
	}
	if err := leafTo(dtreeAhead); err != nil {
		return err
	}
	for j := 0; j < nseg; j++ {
		if parent >= 0 {
			if j+1 < nseg {
				pending[(j+1)%2] = o.post((j+1)%2, parent, tag(phaseTreeDown, in, j+1), part(mine, seg, j+1))
			}
			if err := o.wait(pending[j%2]); err != nil {
				return err
			}
		}
		for _, c := range kids {
			if c >= 0 {
				if err := o.send(c, tag(phaseTreeDown, in, j), part(mine, seg, j)); err != nil {
					return err
				}
			}
		}
		// Keep the leaf tree's receives posted a little ahead; its oldest is
		// awaited only once it is dtreeAhead-1 segments behind this one.
		if err := leafTo(j + 2); err != nil {
			return err
		}
	}
	if err := leafTo(nleaf); err != nil {
		return err
	}
	for ; waited < posted; waited++ {
		if err := o.wait(&o.Recvs[2+waited%dtreeAhead]); err != nil {
			return err
		}
	}
	return nil
}

// dtreeLeafBoth is the whole schedule of a rank that is a leaf in both
// trees: send both halves up, segment by segment, then receive both results
// into buf, each tree's next segment posted before its current one is
// awaited. The two parents are different ranks (a rank is interior in one
// tree at most), so each sees its frames in segment order.
func (o *Op) dtreeLeafBoth(d pattern.DoubleTree, half [2][]byte) error {
	seg := o.Segment
	var nseg [2]int
	for t := range 2 {
		nseg[t] = segments(len(half[t]), seg)
	}
	for j := 0; j < max(nseg[0], nseg[1]); j++ {
		for t := range 2 {
			if j < nseg[t] {
				if err := o.send(d.Parent(t), tag(phaseTreeUp, t, j), part(half[t], seg, j)); err != nil {
					return err
				}
			}
		}
	}
	var pending [2][2]*transport.Recv // [tree][segment parity]
	post := func(t, j int) {
		if j < nseg[t] {
			pending[t][j%2] = o.post(2*t+j%2, d.Parent(t), tag(phaseTreeDown, t, j), part(half[t], seg, j))
		}
	}
	post(0, 0)
	post(1, 0)
	for j := 0; j < max(nseg[0], nseg[1]); j++ {
		for t := range 2 {
			post(t, j+1)
		}
		for t := range 2 {
			if j < nseg[t] {
				if err := o.wait(pending[t][j%2]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
