package algo

import (
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

const phaseBruck = 16

// AllGatherBruck is the Bruck allgather over the dissemination peers
// (pattern.Dissemination): in round k each rank sends the 2^k blocks it
// holds, or what is still missing in the last round, to rank r+2^k and
// receives as many from rank r-2^k. Terms: a block is one rank's count
// elements, at its rank's place in out; the blocks a rank holds before
// round k are its own and the 2^k-1 ranks before it, r, r-1, ..., which
// are consecutive in out but for a wrap past block 0.
//
// ceil(log2 n) rounds for any n; each rank sends (n-1)/n of the output,
// as the ring does. A round is one exchange in segments over the round's
// blocks (Op.exchangeSets): a segment within one run of out moves straight
// between out and the link, one that spans the wrap is packed through a
// scratch slot. in may alias out's own block.
func AllGatherBruck(o *Op, in, out []byte, count int) error {
	n, r, bb := o.Size(), o.Rank(), count*o.esize()
	own := out[r*bb : (r+1)*bb]
	if unsafe.SliceData(in) != unsafe.SliceData(own) {
		copy(own, in)
	}
	if n == 1 || count == 0 {
		return nil
	}
	d := pattern.Dissemination{Rank: r, Size: n}
	sendAt, recvAt := o.indices(n)
	for k := range d.Rounds() {
		cnt := d.AllgatherBlocks(k)
		from := d.RecvPeer(k)
		// This rank sends blocks r-cnt+1 .. r and receives from's,
		// from-cnt+1 .. from, in that order.
		for i := range cnt {
			sendAt[i] = ((r-cnt+1+i)%n + n) % n
			recvAt[i] = ((from-cnt+1+i)%n + n) % n
		}
		send := blockSet{buf: out, at: sendAt[:cnt], bb: bb}
		recv := blockSet{buf: out, at: recvAt[:cnt], bb: bb}
		if err := o.exchangeSets(phaseBruck, k, d.SendPeer(k), send, from, recv, blockSet{}, false); err != nil {
			return err
		}
	}
	return nil
}
