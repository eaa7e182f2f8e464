package algo

import (
	"fmt"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// AllReduceFunc is an all-reduce schedule over count elements of buf, in
// place: AllReduceRing, AllReduceTree, AllReduceDoubleTree, AllReduceRHD.
type AllReduceFunc func(o *Op, buf []byte, count int) error

// Hierarchy is one rank's two levels, in the endpoint's rank numbering.
type Hierarchy struct {
	// Local lists the ranks of this rank's node (level0), by local rank.
	Local []int
	// Cross lists, one per node and in node order, the ranks whose local
	// rank equals this rank's (level1). Every node must have len(Local)
	// ranks, so that every slice has an owner on every node.
	Cross []int
	// Order lists every rank grouped by local rank (topo.SliceOrder): the
	// level1 group of local rank 0, then that of local rank 1, and so on,
	// so Cross is Order[l*N : (l+1)*N] for this rank's local rank l and N
	// nodes. The hierarchical allgather and reduce-scatter hand local rank
	// l the blocks of those ranks; the all-reduce does not need it.
	Order []int
}

// Level0 names the intra-node schedule of a hierarchical algorithm.
type Level0 uint8

// The intra-node schedules. Level0RHD needs a power-of-two node size.
// Level0Node runs the level0 legs as whole-node collectives (Op.Node, the
// shared-memory mesh engine): the all-reduce's two legs on the node's blocks
// of the buffer, and the allgather's and reduce-scatter's legs on the
// node's consecutive blocks, which needs nodes of consecutive ranks
// (Hierarchy.Consecutive).
const (
	Level0Ring Level0 = iota
	Level0RHD
	Level0Node
)

// NodeCollectives are a node's collectives that move no frames (the
// shared-memory mesh engine), for Level0Node. Their local ranks are the
// node's ranks in h.Local order. node is L blocks of one node's part of a
// buffer, in local rank order; own is this rank's block of it.
type NodeCollectives interface {
	// AllGather fills node from every local rank's own block, in place.
	AllGather(own, node []byte) error
	// ReduceScatter reduces node over the local ranks into out, which
	// receives this rank's block of the result; node is not modified.
	ReduceScatter(node, out []byte) error
	// ReduceScatterBlocks reduces buf (count elements split by
	// pattern.Blocks(count, L, l)) over the node, in place: afterwards
	// local rank l's block holds the node's reduction, the others are
	// left as they were.
	ReduceScatterBlocks(buf []byte, count int) error
	// AllGatherBlocks fills every block of buf from its owner, in place.
	AllGatherBlocks(buf []byte, count int) error
}

// AllReduceHier is the hierarchical all-reduce, in three legs:
//
//  1. level0 reduce-scatter among the ranks of the node (ring, recursive
//     halving, or the node's engine), which leaves local rank l with slice
//     l of the buffer (pattern.Blocks(count, L, l)) reduced over the node;
//  2. level1 all-reduce of slice l among the ranks with local rank l, one
//     per node, with the level1 schedule;
//  3. level0 allgather of the slices among the ranks of the node.
//
// With L ranks per node and N nodes, a rank sends 2(L-1)/L*S inside the node
// and what the level1 schedule sends for S/L across nodes; all L slices
// cross at once, one per rank. Each slice is reduced in one fixed order and
// then copied, so every rank ends with the same bits.
func AllReduceHier(o *Op, buf []byte, count int, h Hierarchy, level0 Level0, level1 AllReduceFunc) error {
	if o.Size() == 1 || count == 0 {
		return nil
	}
	l0 := o.View(h.Local, phaseLevel0)
	if l0 == nil {
		return fmt.Errorf("internal: rank %d is not in its own level0 group %v", o.Mesh.Rank(), h.Local)
	}
	L, lr := l0.Size(), l0.Rank()
	hd := pattern.HalvingDoubling{Rank: lr, Size: L}
	if level0 == Level0RHD && hd.Extra() != 0 {
		return fmt.Errorf("internal: level0 halving-doubling needs a power-of-two node size, not %d", L)
	}
	if level0 == Level0Node && o.Node == nil {
		return fmt.Errorf("internal: a node level0 needs the node's collectives")
	}
	var err error
	switch level0 {
	case Level0RHD:
		err = halvingReduceScatter(l0, hd, buf, count)
	case Level0Node:
		err = o.Node.ReduceScatterBlocks(buf, count)
	default:
		err = reduceScatterRing(l0, buf, nil, count)
	}
	if err != nil {
		return err
	}
	es := o.esize()
	off, n := pattern.Blocks(count, L, lr)
	if l1 := o.View(h.Cross, phaseLevel1); l1 == nil {
		return fmt.Errorf("internal: rank %d is not in its own level1 group %v", o.Mesh.Rank(), h.Cross)
	} else if err := level1(l1, buf[off*es:(off+n)*es], n); err != nil {
		return err
	}
	l0 = o.View(h.Local, phaseLevel0)
	switch level0 {
	case Level0RHD:
		return doublingAllGather(l0, hd, buf, count)
	case Level0Node:
		return o.Node.AllGatherBlocks(buf, count)
	}
	return allGatherRing(l0, buf, count)
}
