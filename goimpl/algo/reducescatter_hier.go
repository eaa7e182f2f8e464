package algo

import (
	"fmt"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// ReduceScatterHier is the hierarchical reduce-scatter, in two legs:
//
//  1. level0 reduce-scatter among the ranks of the node (h.Local; ring, or
//     recursive halving when L is a power of two) over slices: slice c is
//     the N blocks of the ranks h.Order[c*N : (c+1)*N], the ranks with
//     local rank c. Afterwards local rank l holds slice l reduced over its
//     node, its N blocks in node order, in the work buffer;
//  2. level1 reduce-scatter of that slice among the ranks with local rank
//     l, one per node (h.Cross; ring, or recursive halving folded for any
//     number of nodes): node m's rank gets block m, which is its own.
//
// Terms: a block is one rank's count elements of the result, at its rank's
// place in in; a slice, as in AllGatherHier. A slice's blocks are spread
// through in (every L-th block when nodes hold consecutive ranks); the
// level0 leg packs a frame that spans blocks through a scratch slot, and
// its partial sums gather in the work buffer, contiguous in node order,
// which the level1 leg reads as its input.
//
// With L ranks per node and N nodes a rank sends (L-1)/L of S inside its
// node and (N-1)/N of S/L across nodes (S the input); level0 takes L-1 or
// log2 L steps, level1 N-1 or about log2 N steps. in is
// not modified. The work buffer (o.Work) holds one slice for a level0 ring,
// L/2 slices for level0 halving, one more slice for level1 halving.
func ReduceScatterHier(o *Op, in, out []byte, count int, h Hierarchy, level0 Level0, level1 Level1) error {
	n, bb := o.Size(), count*o.esize()
	if n == 1 || count == 0 {
		if unsafe.SliceData(in) != unsafe.SliceData(out) {
			copy(out, in[:len(out)])
		}
		return nil
	}
	L, N, l, err := h.slices(o)
	if err != nil {
		return err
	}
	hd := pattern.HalvingDoubling{Rank: l, Size: L}
	if level0 == Level0RHD && hd.Extra() != 0 {
		return fmt.Errorf("internal: level0 recursive halving needs a power-of-two node size, not %d", L)
	}
	if level0 == Level0Node && (o.Node == nil || !h.Consecutive()) {
		return fmt.Errorf("internal: a node level0 needs the node's collectives and nodes of consecutive ranks")
	}
	sliceBytes := N * bb
	acc0 := sliceBytes // level0 accumulation
	switch {
	case L == 1:
		acc0 = 0
	case level0 == Level0RHD:
		acc0 = L / 2 * sliceBytes
	}
	acc1 := 0
	if level1 == Level1RHD && N > 1 {
		acc1 = sliceBytes
	}
	work := o.work(acc0 + acc1)
	w0, w1 := work[:acc0], work[acc0:]

	// Leg 1: slices inside the node.
	var slice []byte
	l0 := o.View(h.Local, phaseLevel0)
	switch {
	case L == 1:
		// One rank per node: nodes are numbered by their lowest rank, so
		// node m is rank m and in is already the slice in node order.
		slice = in
	case level0 == Level0Node:
		// Slice l is block l of every node: one reduce-scatter per
		// node, each leaving its block at the node's place in w0.
		for m := range N {
			if err = o.Node.ReduceScatter(in[m*L*bb:(m+1)*L*bb], w0[m*bb:(m+1)*bb]); err != nil {
				return err
			}
		}
		slice = w0
	case level0 == Level0RHD:
		slice, err = reduceScatterSlicesRH(l0, hd, in, h.Order, N, bb, w0)
	default:
		slice, err = reduceScatterSlicesRing(l0, in, h.Order, N, bb, w0)
	}
	if err != nil {
		return err
	}
	// Leg 2: this slice across nodes.
	l1 := o.View(h.Cross, phaseLevel1)
	if level1 == Level1RHD && N > 1 {
		return reduceScatterRH(l1, slice, out, count, w1)
	}
	return ReduceScatterRing(l1, slice, out, count)
}

// reduceScatterSlicesRing is the ring reduce-scatter of o's Size slices of
// in, slice c being the blocks order[c*per : (c+1)*per] (bb bytes each):
// the partial sums travel in acc (one slice, its blocks contiguous), which
// ends holding slice Rank() reduced over the group.
func reduceScatterSlicesRing(o *Op, in []byte, order []int, per, bb int, acc []byte) ([]byte, error) {
	ring := pattern.Ring{Rank: o.Rank(), Size: o.Size()}
	slice := func(c int) blockSet { return blockSet{in, order[c*per : (c+1)*per], bb} }
	partial := blockSet{acc, nil, bb}
	for s := 0; s < ring.Steps(); s++ {
		send := partial // what arrived at step s-1 goes on at step s
		if s == 0 {
			send = slice(ring.RSSendChunk(s))
		}
		err := o.exchangeSets(phaseReduceScatter, s, ring.Next(), send, ring.Prev(), slice(ring.RSRecvChunk(s)), partial, true)
		if err != nil {
			return nil, err
		}
	}
	return acc, nil
}

// reduceScatterSlicesRH is the recursive-halving reduce-scatter of o's Size
// slices of in (a power of two; hd has no extra ranks), slice c being the
// blocks order[c*per : (c+1)*per]. acc holds the slices kept after the
// first step, Keep(0), in slice order; it returns the part of acc holding
// slice Rank(), reduced over the group.
func reduceScatterSlicesRH(o *Op, hd pattern.HalvingDoubling, in []byte, order []int, per, bb int, acc []byte) ([]byte, error) {
	base, _ := hd.Keep(0)
	// slices returns slices [lo, hi): in the input before the first
	// reduce, in acc after.
	slices := func(k, lo, hi int) blockSet {
		if k == 0 {
			return blockSet{in, order[lo*per : hi*per], bb}
		}
		return blockSet{acc[(lo-base)*per*bb : (hi-base)*per*bb], nil, bb}
	}
	for k := 0; k < hd.Steps(); k++ {
		keepLo, keepHi := hd.Keep(k)
		sendLo, sendHi := hd.Send(k)
		peer := hd.Partner(k)
		kept := blockSet{acc[(keepLo-base)*per*bb : (keepHi-base)*per*bb], nil, bb}
		err := o.exchangeSets(phaseHalving, k, peer, slices(k, sendLo, sendHi), peer, slices(k, keepLo, keepHi), kept, true)
		if err != nil {
			return nil, err
		}
	}
	q := (o.Rank() - base) * per
	return acc[q*bb : (q+per)*bb], nil
}
