package pattern

import "math/bits"

// HalvingDoubling is rank Rank's view of recursive halving-doubling
// (Rabenseifner's allreduce: a recursive-halving reduce-scatter, then a
// recursive-doubling allgather) over Size ranks, Size not necessarily a
// power of two.
//
// Terms:
//   - p = Pow2(), the largest power of two <= Size; extra = Size-p.
//   - Folding: the first 2*extra ranks pair up as (2i, 2i+1). Before the
//     halving the even rank 2i sends its whole buffer to the odd rank 2i+1,
//     which reduces it into its own and stands in for both; after the
//     doubling the odd rank sends the result back. The even ranks of those
//     pairs are inactive; every other rank is active.
//   - Virtual rank: the active ranks renumbered 0..p-1 in rank order:
//     odd rank 2i+1 (i < extra) is virtual rank i, and rank r >= 2*extra
//     is virtual rank r-extra.
//   - Block: the buffer is cut into p blocks, block b being
//     Blocks(count, p, b); ranges of blocks are half-open [lo, hi) and map
//     to elements with BlockSpan(count, p, lo, hi).
//   - Step: halving step k, 0 <= k < Steps() = log2 p. Before it, virtual
//     rank v holds the 2*d blocks that share v's bits above d = p>>(k+1)
//     (all p before step 0). At step k it exchanges with the virtual rank
//     v XOR d: it keeps the half whose bit d matches its own (Keep), sends
//     the other half (Send), which is exactly what its partner keeps, and
//     reduces what it receives into the half it keeps. After the last step
//     virtual rank v holds block v, fully reduced.
//
// The recursive-doubling allgather runs the same steps backwards: at its
// step j, with k = Steps()-1-j, a rank sends Keep(k) to Partner(k) and
// receives Send(k), ending with all p blocks.
type HalvingDoubling struct {
	Rank, Size int
}

// Validate reports whether h describes a rank in a non-empty group.
func (h HalvingDoubling) Validate() error {
	return validate(h.Size, rankName, h.Rank)
}

// Pow2 returns p, the number of active ranks and of blocks: the largest
// power of two <= Size.
func (h HalvingDoubling) Pow2() int {
	return floorPow2(h.Size)
}

// Extra returns the number of ranks folded away: Size-Pow2().
func (h HalvingDoubling) Extra() int {
	return h.Size - h.Pow2()
}

// Steps returns the number of halving steps (and of doubling steps):
// log2 Pow2().
func (h HalvingDoubling) Steps() int {
	return bits.Len(uint(h.Size)) - 1
}

// Active reports whether this rank takes part in the halving and doubling
// steps; inactive ranks only fold into and are unfolded from FoldPartner.
func (h HalvingDoubling) Active() bool {
	return h.Rank >= 2*h.Extra() || h.Rank%2 == 1
}

// FoldPartner returns the other rank of this rank's fold pair, or -1 if this
// rank is not in one (Rank >= 2*Extra()). For an inactive rank it is the
// active rank that stands in for it.
func (h HalvingDoubling) FoldPartner() int {
	if h.Rank >= 2*h.Extra() {
		return -1
	}
	return h.Rank ^ 1
}

// VirtualRank returns this rank's virtual rank, or -1 if it is inactive.
func (h HalvingDoubling) VirtualRank() int {
	e := h.Extra()
	switch {
	case h.Rank >= 2*e:
		return h.Rank - e
	case h.Rank%2 == 1:
		return h.Rank / 2
	default:
		return -1
	}
}

// RealRank returns the rank of virtual rank v, 0 <= v < Pow2().
func (h HalvingDoubling) RealRank(v int) int {
	if e := h.Extra(); v < e {
		return 2*v + 1
	}
	return v + h.Extra()
}

// distance returns d, the virtual-rank distance to the partner at step k.
func (h HalvingDoubling) distance(k int) int {
	return h.Pow2() >> (k + 1)
}

// Partner returns the rank this active rank exchanges with at step k,
// 0 <= k < Steps(), or -1 if this rank is inactive. Partners are mutual:
// this rank is its partner's partner at the same step.
func (h HalvingDoubling) Partner(k int) int {
	v := h.VirtualRank()
	if v < 0 {
		return -1
	}
	return h.RealRank(v ^ h.distance(k))
}

// Keep returns the blocks [lo, hi) this active rank keeps, and holds the
// reduction of, after halving step k. Keep(Steps()-1) is the single block
// [VirtualRank(), VirtualRank()+1). For an inactive rank it returns 0, 0.
func (h HalvingDoubling) Keep(k int) (lo, hi int) {
	return h.half(h.VirtualRank(), k)
}

// Send returns the blocks [lo, hi) this active rank sends to Partner(k) at
// halving step k: the half it gives up, which its partner keeps. For an
// inactive rank it returns 0, 0.
func (h HalvingDoubling) Send(k int) (lo, hi int) {
	v := h.VirtualRank()
	if v < 0 {
		return 0, 0
	}
	return h.half(v^h.distance(k), k)
}

// half returns the blocks virtual rank v keeps at step k: the d = p>>(k+1)
// blocks whose indices agree with v on every bit from d up.
func (h HalvingDoubling) half(v, k int) (lo, hi int) {
	if v < 0 {
		return 0, 0
	}
	d := h.distance(k)
	lo = v &^ (d - 1)
	return lo, lo + d
}

// RealSpan returns the real ranks [lo, hi) that virtual ranks [vlo, vhi)
// stand for, 0 <= vlo <= vhi <= Pow2(): virtual rank v < Extra() stands for
// the fold pair 2v, 2v+1, any other for rank v+Extra() alone, so the runs of
// consecutive virtual ranks are runs of consecutive real ranks. A
// reduce-scatter whose result block b belongs to rank b cuts its buffer into
// virtual blocks this way (virtual block v is real blocks RealSpan(v, v+1)),
// so that each active rank's last kept block holds exactly the blocks of
// the ranks it stands for.
func (h HalvingDoubling) RealSpan(vlo, vhi int) (lo, hi int) {
	e := h.Extra()
	return vlo + min(vlo, e), vhi + min(vhi, e)
}
