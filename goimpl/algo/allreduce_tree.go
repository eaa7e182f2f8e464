package algo

import (
	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// AllReduceTree reduces buf up the binary tree of pattern.BinaryTree and
// broadcasts the result back down, both streamed in segments so that a large
// message flows through the tree as a pipeline: while a parent reduces
// segment j its children already send segment j+1.
//
// Terms: a segment is at most Op.Segment bytes of buf; an up step of segment
// j at a rank receives j from each child (into scratch slots 0 and 1),
// reduces them into buf's segment j in place (own, then left, then right),
// and sends the partial sum to the parent; a down step receives the root's
// result straight into buf and forwards it to the children.
//
// 2*floor(log2 n) steps of latency plus the pipeline; an interior rank
// receives 2S and sends S going up, receives S and sends 2S coming down.
// Every rank ends with the root's bits, computed once and copied.
func AllReduceTree(o *Op, buf []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		return nil
	}
	t := pattern.BinaryTree{Rank: o.Rank(), Size: o.Size()}
	parent, kids := t.Parent(), t.Children()
	seg := o.Segment
	nseg := segments(len(buf), seg)
	for j := 0; j < nseg; j++ {
		mine := part(buf, seg, j)
		if err := o.treeUp(0, j, mine, mine, parent, phaseTreeUp, kids); err != nil {
			return err
		}
	}
	return o.treeDownAll(0, buf, parent, kids)
}

// treeUp runs the up step of segment j of tree t (t numbers the trees of a
// double tree, 0 for a single one): acc = mine op left op right, in that
// order, goes to the parent in a frame of phase up. acc may be mine itself
// (all-reduce: in place) or scratch (rooted reduce, whose non-root buffers
// stay as they were); with no children mine goes up as it is.
func (o *Op) treeUp(t, j int, mine, acc []byte, parent, up int, kids [2]int) error {
	var pending [2]*transport.Recv
	for i, c := range kids {
		if c >= 0 {
			pending[i] = o.post(2*t+i, c, tag(phaseTreeUp, t, j), o.slot(i)[:len(mine)])
		}
	}
	out := mine
	for i, r := range pending {
		if r == nil {
			continue
		}
		if err := o.wait(r); err != nil {
			return err
		}
		if i == 0 {
			o.Kernel3(acc, mine, r.Buf)
			out = acc
		} else {
			o.Kernel(acc, r.Buf)
		}
	}
	if parent < 0 {
		return nil
	}
	return o.send(parent, tag(up, t, j), out)
}

// treeDownAll streams all of buf down tree t with the receive of segment j+1
// posted before segment j is forwarded, so frames land in buf directly.
func (o *Op) treeDownAll(t int, buf []byte, parent int, kids [2]int) error {
	seg := o.Segment
	nseg := segments(len(buf), seg)
	var pending [2]*transport.Recv
	if parent >= 0 && nseg > 0 {
		pending[0] = o.post(0, parent, tag(phaseTreeDown, t, 0), part(buf, seg, 0))
	}
	for j := 0; j < nseg; j++ {
		if parent >= 0 {
			if j+1 < nseg {
				pending[(j+1)%2] = o.post((j+1)%2, parent, tag(phaseTreeDown, t, j+1), part(buf, seg, j+1))
			}
			if err := o.wait(pending[j%2]); err != nil {
				return err
			}
		}
		for _, c := range kids {
			if c >= 0 {
				if err := o.send(c, tag(phaseTreeDown, t, j), part(buf, seg, j)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
