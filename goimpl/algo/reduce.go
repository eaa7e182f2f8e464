package algo

import "github.com/gohccl/gohccl/goimpl/algo/pattern"

const phaseReduce = 4

// ReduceTree reduces buf onto root up a binomial tree, segment by segment:
// each rank receives a segment from each child (smallest subtree first),
// reduces it and sends the partial result to its parent. Non-root buffers
// are not modified (partials accumulate in scratch); root's is reduced in
// place.
func ReduceTree(o *Op, buf []byte, root int) error {
	t := pattern.Binomial{Rank: o.Rank(), Size: o.Size(), Root: root}
	var kids [32]int
	return reduceUp(o, buf, t.Parent(), t.ReduceChildren(kids[:0]))
}

// ReduceChain reduces buf onto root along the chain that ends at root: the
// last rank sends its segment to its predecessor, each rank adds its own and
// passes it on, pipelined in segments.
func ReduceChain(o *Op, buf []byte, root int) error {
	c := pattern.Chain{Rank: o.Rank(), Size: o.Size(), Root: root}
	var kids [1]int
	children := kids[:0]
	if next := c.Next(); next >= 0 {
		children = append(children, next)
	}
	return reduceUp(o, buf, c.Prev(), children)
}

func reduceUp(o *Op, buf []byte, parent int, children []int) error {
	seg := o.Segment
	for j := 0; j < segments(len(buf), seg); j++ {
		mine := part(buf, seg, j)
		acc := mine // what goes to the parent: own data until a child adds in
		for i, c := range children {
			r := o.post(0, c, tag(phaseReduce, 0, j), o.slot(0)[:len(mine)])
			if err := o.wait(r); err != nil {
				return err
			}
			switch {
			case parent < 0: // root: reduce in place
				o.Kernel(mine, r.Buf)
			case i == 0:
				acc = o.slot(2)[:len(mine)]
				o.Kernel3(acc, mine, r.Buf)
			default:
				o.Kernel(acc, r.Buf)
			}
		}
		if parent >= 0 {
			if err := o.send(parent, tag(phaseReduce, 0, j), acc); err != nil {
				return err
			}
		}
	}
	return nil
}
