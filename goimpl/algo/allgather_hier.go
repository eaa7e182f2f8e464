package algo

import (
	"fmt"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// AllGatherHier is the hierarchical allgather, in two legs:
//
//  1. level1 allgather among the ranks with this rank's local rank l, one
//     per node (h.Cross; ring, or recursive doubling when the number of
//     nodes is a power of two): afterwards this rank holds slice l, the
//     blocks of h.Order[l*N : (l+1)*N];
//  2. level0 allgather of the slices among the ranks of the node (h.Local;
//     ring, or recursive doubling when L is a power of two), slice c being
//     the N blocks of h.Order[c*N : (c+1)*N].
//
// Terms: a block is one rank's count elements, at its rank's place in out;
// a slice is the N blocks one local rank gathers across nodes. Blocks land
// in out where they belong, so a slice is N blocks spread through out
// (every L-th block when nodes hold consecutive ranks); a frame that spans
// blocks is packed and unpacked through a scratch slot (Op.exchangeSets).
//
// With L ranks per node and N nodes a rank sends (N-1)/N of S/L across
// nodes and (L-1)/L of S inside its node (S the output), against (n-1)/n of
// S across nodes for a flat ring; level1 takes N-1 steps (ring) or log2 N
// (doubling), level0 L-1 or log2 L steps. in may alias
// out's own block.
func AllGatherHier(o *Op, in, out []byte, count int, h Hierarchy, level0 Level0, level1 Level1) error {
	n, r, bb := o.Size(), o.Rank(), count*o.esize()
	own := out[r*bb : (r+1)*bb]
	if unsafe.SliceData(in) != unsafe.SliceData(own) {
		copy(own, in)
	}
	if n == 1 || count == 0 {
		return nil
	}
	L, N, l, err := h.slices(o)
	if err != nil {
		return err
	}
	if level1 == Level1RHD && !CanAllGatherRD(N) {
		return fmt.Errorf("internal: level1 recursive doubling needs a power-of-two number of nodes, not %d", N)
	}
	if level0 == Level0RHD && !CanAllGatherRD(L) {
		return fmt.Errorf("internal: level0 recursive doubling needs a power-of-two node size, not %d", L)
	}
	if level0 == Level0Node && (o.Node == nil || !h.Consecutive()) {
		return fmt.Errorf("internal: a node level0 needs the node's collectives and nodes of consecutive ranks")
	}
	// Leg 1: slice l across nodes. Level1 rank m owns block h.Cross[m].
	l1 := o.View(h.Cross, phaseLevel1)
	if level1 == Level1RHD {
		err = allGatherBlocksRD(l1, pattern.HalvingDoubling{Rank: l1.Rank(), Size: N}, h.Cross, 1, out, bb)
	} else {
		err = allGatherBlocksRing(l1, h.Cross, 1, out, bb)
	}
	if err != nil {
		return err
	}
	// Leg 2: slices inside the node. Level0 rank c owns h.Order[c*N:(c+1)*N].
	if level0 == Level0Node {
		// Slice l is block l of every node: one allgather per node.
		for m := range N {
			node := out[m*L*bb : (m+1)*L*bb]
			if err := o.Node.AllGather(node[l*bb:(l+1)*bb], node); err != nil {
				return err
			}
		}
		return nil
	}
	l0 := o.View(h.Local, phaseLevel0)
	if level0 == Level0RHD {
		return allGatherBlocksRD(l0, pattern.HalvingDoubling{Rank: l, Size: L}, h.Order, N, out, bb)
	}
	return allGatherBlocksRing(l0, h.Order, N, out, bb)
}

// allGatherBlocksRing is the ring allgather of o's Size chunks, chunk c
// being the blocks order[c*per : (c+1)*per] of buf (bb bytes each); this
// rank starts owning chunk Rank().
func allGatherBlocksRing(o *Op, order []int, per int, buf []byte, bb int) error {
	ring := pattern.Ring{Rank: o.Rank(), Size: o.Size()}
	chunk := func(c int) blockSet { return blockSet{buf, order[c*per : (c+1)*per], bb} }
	for s := 0; s < ring.Steps(); s++ {
		err := o.exchangeSets(phaseAllGather, s, ring.Next(), chunk(ring.AGSendChunk(s)),
			ring.Prev(), chunk(ring.AGRecvChunk(s)), blockSet{}, false)
		if err != nil {
			return err
		}
	}
	return nil
}

// allGatherBlocksRD is the recursive-doubling allgather of o's Size chunks
// (a power of two; hd must have no extra ranks), chunk c being the blocks
// order[c*per : (c+1)*per] of buf: at step j a rank sends the chunks it
// holds, Keep(k) for k = Steps()-1-j, and receives its partner's.
func allGatherBlocksRD(o *Op, hd pattern.HalvingDoubling, order []int, per int, buf []byte, bb int) error {
	steps := hd.Steps()
	for j := 0; j < steps; j++ {
		k := steps - 1 - j
		peer := hd.Partner(k)
		keepLo, keepHi := hd.Keep(k)
		sendLo, sendHi := hd.Send(k)
		err := o.exchangeSets(phaseDoubling, j, peer, blockSet{buf, order[keepLo*per : keepHi*per], bb},
			peer, blockSet{buf, order[sendLo*per : sendHi*per], bb}, blockSet{}, false)
		if err != nil {
			return err
		}
	}
	return nil
}
