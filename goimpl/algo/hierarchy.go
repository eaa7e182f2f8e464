package algo

import "fmt"

// Level1 names the inter-node schedule of a hierarchical allgather or
// reduce-scatter (the all-reduce takes any AllReduceFunc instead).
type Level1 uint8

// The inter-node schedules of the hierarchical allgather and
// reduce-scatter. Level1RHD is recursive doubling for the allgather (it
// needs a power-of-two number of nodes) and recursive halving, folded, for
// the reduce-scatter.
const (
	Level1Ring Level1 = iota
	Level1RHD
)

// slices checks that h describes this rank of o's group for the
// hierarchical allgather and reduce-scatter, and returns L ranks per node,
// N nodes and this rank's local rank l.
func (h Hierarchy) slices(o *Op) (L, N, l int, err error) {
	L, N, n := len(h.Local), len(h.Cross), o.Size()
	me := o.Mesh.Rank()
	l = -1
	for i, r := range h.Local {
		if r == me {
			l = i
		}
	}
	switch {
	case L*N != n || len(h.Order) != n:
		return 0, 0, 0, fmt.Errorf("internal: hierarchy of %d ranks per node, %d nodes and %d ranks in slice order does not cover %d ranks", L, N, len(h.Order), n)
	case l < 0:
		return 0, 0, 0, fmt.Errorf("internal: rank %d is not in its own level0 group %v", me, h.Local)
	}
	inCross := false
	for m, r := range h.Cross {
		if h.Order[l*N+m] != r {
			return 0, 0, 0, fmt.Errorf("internal: slice order %v disagrees with rank %d's level1 group %v", h.Order, me, h.Cross)
		}
		inCross = inCross || r == me
	}
	if !inCross {
		return 0, 0, 0, fmt.Errorf("internal: rank %d is not in its own level1 group %v", me, h.Cross)
	}
	return L, N, l, nil
}

// swapBlocks sends blocks send[i] of buf to sendPeer and receives blocks
// recv[i] into buf from recvPeer, bb bytes each, one exchange per block: a
// hierarchical slice is a set of blocks spread through the buffer, not one
// run. Block i of the step is tagged step*width+i, width at least the
// number of blocks in any step. The blocks of a slice are not adjacent in
// the buffer (every L-th when nodes hold consecutive ranks), so each is a
// frame of its own and costs a latency.
func (o *Op) swapBlocks(phase, step, width, sendPeer int, send []int, recvPeer int, recv []int, buf []byte, bb int) error {
	for i := range max(len(send), len(recv)) {
		var s, r []byte
		if i < len(send) {
			s = buf[send[i]*bb : (send[i]+1)*bb]
		}
		if i < len(recv) {
			r = buf[recv[i]*bb : (recv[i]+1)*bb]
		}
		if err := o.exchange(phase, step*width+i, sendPeer, s, recvPeer, r, nil); err != nil {
			return err
		}
	}
	return nil
}
