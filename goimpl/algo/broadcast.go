package algo

import (
	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/transport"
)

const phaseBroadcast = 3

// BroadcastTree broadcasts buf from root down a binomial tree, streamed in
// segments: ceil(log2 n) steps, the root sends the message once per child.
func BroadcastTree(o *Op, buf []byte, root int) error {
	t := pattern.Binomial{Rank: o.Rank(), Size: o.Size(), Root: root}
	var kids [32]int
	return broadcastDown(o, buf, t.Parent(), t.Children(kids[:0]))
}

// BroadcastChain broadcasts buf from root along the chain root, root+1, ...,
// each rank forwarding segment j while it receives segment j+1: n-1+S/seg
// segment times, every rank sends the message at most once.
func BroadcastChain(o *Op, buf []byte, root int) error {
	c := pattern.Chain{Rank: o.Rank(), Size: o.Size(), Root: root}
	var kids [1]int
	children := kids[:0]
	if next := c.Next(); next >= 0 {
		children = append(children, next)
	}
	return broadcastDown(o, buf, c.Prev(), children)
}

// broadcastDown receives each segment from parent (none at the root) straight
// into buf and forwards it to every child.
func broadcastDown(o *Op, buf []byte, parent int, children []int) error {
	seg := o.Segment
	nseg := segments(len(buf), seg)
	var pending [2]*transport.Recv
	if parent >= 0 && nseg > 0 {
		pending[0] = o.post(0, parent, tag(phaseBroadcast, 0, 0), part(buf, seg, 0))
	}
	for j := 0; j < nseg; j++ {
		if parent >= 0 {
			if j+1 < nseg {
				pending[(j+1)%2] = o.post((j+1)%2, parent, tag(phaseBroadcast, 0, j+1), part(buf, seg, j+1))
			}
			if err := o.wait(pending[j%2]); err != nil {
				return err
			}
		}
		for _, c := range children {
			if err := o.send(c, tag(phaseBroadcast, 0, j), part(buf, seg, j)); err != nil {
				return err
			}
		}
	}
	return nil
}
