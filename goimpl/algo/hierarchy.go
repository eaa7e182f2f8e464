package algo

import (
	"fmt"

	"github.com/gohccl/gohccl/goimpl/transport"
)

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

// blockSet is a run of bytes made of whole blocks of a buffer: the blocks
// at[0], at[1], ... of buf, bb bytes each, in that order, or with at nil
// buf itself (its consecutive blocks). A hierarchical slice is such a run:
// its blocks are spread through the buffer (every L-th when nodes hold
// consecutive ranks).
type blockSet struct {
	buf []byte
	at  []int
	bb  int
}

// size returns the run's length in bytes.
func (b blockSet) size() int {
	if b.at == nil {
		return len(b.buf)
	}
	return len(b.at) * b.bb
}

// piece returns the bytes [lo, hi) of the run when they lie in one block
// (or the run is contiguous), else nil.
func (b blockSet) piece(lo, hi int) []byte {
	if b.at == nil {
		return b.buf[lo:hi]
	}
	i := lo / b.bb
	if (hi-1)/b.bb != i {
		return nil
	}
	off := b.at[i]*b.bb - i*b.bb
	return b.buf[off+lo : off+hi]
}

// each calls f for the parts of bytes [lo, hi) of the run, block by block,
// with each part's offset from lo.
func (b blockSet) each(lo, hi int, f func(part []byte, off int)) {
	for x := lo; x < hi; {
		end := hi
		if b.at != nil {
			end = min(hi, (x/b.bb+1)*b.bb)
		}
		f(b.piece(x, end), x-lo)
		x = end
	}
}

// exchangeSets is exchange over runs of blocks: it sends the run send to
// sendPeer and receives recv's length from recvPeer in segments, with the
// receive of segment j+1 posted before segment j is sent. A segment that
// lies in one block moves straight between it and the link; one that spans
// blocks is packed into scratch slot 2 to be sent, or received into a slot
// and unpacked, so that a step costs a frame per segment of the run and not
// a frame per block. With acc nil the segments land in recv; with acc set
// they land in slots 0 and 1 and are reduced: acc = recv op received (acc
// may be recv itself, and may be send when the segment is sent before it is
// overwritten, as in the ring).
func (o *Op) exchangeSets(phase, step, sendPeer int, send blockSet, recvPeer int, recv, acc blockSet, reduce bool) error {
	seg := o.Segment
	sendLen, recvLen := send.size(), recv.size()
	nsend, nrecv := segments(sendLen, seg), segments(recvLen, seg)
	span := func(j, n int) (int, int) { return j * seg, min((j+1)*seg, n) }
	dst := func(j int) []byte {
		lo, hi := span(j, recvLen)
		if !reduce {
			if p := recv.piece(lo, hi); p != nil {
				return p
			}
		}
		return o.slot(j % 2)[:hi-lo]
	}
	var pending [2]*transport.Recv
	if nrecv > 0 {
		pending[0] = o.post(0, recvPeer, tag(phase, step, 0), dst(0))
	}
	for j := 0; j < max(nsend, nrecv); j++ {
		if j+1 < nrecv {
			pending[(j+1)%2] = o.post((j+1)%2, recvPeer, tag(phase, step, j+1), dst(j+1))
		}
		if j < nsend {
			lo, hi := span(j, sendLen)
			payload := send.piece(lo, hi)
			if payload == nil {
				payload = o.slot(2)[:hi-lo]
				send.each(lo, hi, func(part []byte, off int) { copy(payload[off:], part) })
			}
			if err := o.send(sendPeer, tag(phase, step, j), payload); err != nil {
				return err
			}
		}
		if j < nrecv {
			r := pending[j%2]
			if err := o.wait(r); err != nil {
				return err
			}
			lo, hi := span(j, recvLen)
			switch {
			case reduce:
				recv.each(lo, hi, func(part []byte, off int) {
					o.Kernel3(acc.piece(lo+off, lo+off+len(part)), part, r.Buf[off:off+len(part)])
				})
			case recv.piece(lo, hi) == nil:
				recv.each(lo, hi, func(part []byte, off int) { copy(part, r.Buf[off:]) })
			}
		}
	}
	return nil
}

// Consecutive reports whether every node holds consecutive ranks, node m
// the ranks m*L to m*L+L-1, in slice order: slice c is then the ranks c,
// L+c, 2L+c, ..., and the level0 leg of the hierarchical allgather or
// reduce-scatter is one collective over each node's L consecutive blocks.
func (h Hierarchy) Consecutive() bool {
	L, N := len(h.Local), len(h.Cross)
	if len(h.Order) != L*N {
		return false
	}
	for c := range L {
		for m := range N {
			if h.Order[c*N+m] != m*L+c {
				return false
			}
		}
	}
	return true
}
