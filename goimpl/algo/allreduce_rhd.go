package algo

import "github.com/gohccl/gohccl/goimpl/algo/pattern"

// AllReduceRHD is Rabenseifner's all-reduce over pattern.HalvingDoubling: a
// recursive-halving reduce-scatter leaves each of the p = 2^floor(log2 n)
// active ranks with one fully reduced block of p, a recursive-doubling
// allgather then hands the blocks back out. When n is not a power of two the
// first 2(n-p) ranks fold in pairs first: the even rank of a pair sends its
// whole buffer to the odd one, which reduces it in and stands in for both,
// and gets the result back at the end.
//
// 2*log2(p) steps (+2 when folding); each active rank sends 2(p-1)/p*S, a
// folding pair adds S each way. Each block is reduced by one rank and copied
// to the others, so every rank ends with the same bits.
func AllReduceRHD(o *Op, buf []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		return nil
	}
	h := pattern.HalvingDoubling{Rank: o.Rank(), Size: o.Size()}
	fp := h.FoldPartner()
	if !h.Active() {
		if err := o.exchange(phaseFold, 0, fp, buf, fp, nil, nil); err != nil {
			return err
		}
		return o.exchange(phaseUnfold, 0, fp, nil, fp, buf, nil)
	}
	if fp >= 0 {
		if err := o.exchange(phaseFold, 0, fp, nil, fp, buf, buf); err != nil {
			return err
		}
	}
	if err := halvingReduceScatter(o, h, buf, count); err != nil {
		return err
	}
	if err := doublingAllGather(o, h, buf, count); err != nil {
		return err
	}
	if fp >= 0 {
		return o.exchange(phaseUnfold, 0, fp, buf, fp, nil, nil)
	}
	return nil
}

// halvingReduceScatter runs the halving steps of h on an active rank: buf's
// count elements are cut into h.Pow2() blocks and virtual rank v ends
// holding block v fully reduced (in place in buf).
func halvingReduceScatter(o *Op, h pattern.HalvingDoubling, buf []byte, count int) error {
	for k := 0; k < h.Steps(); k++ {
		keepLo, keepHi := h.Keep(k)
		sendLo, sendHi := h.Send(k)
		keep := spanBytes(o, buf, count, h.Pow2(), keepLo, keepHi)
		send := spanBytes(o, buf, count, h.Pow2(), sendLo, sendHi)
		peer := h.Partner(k)
		if err := o.exchange(phaseHalving, k, peer, send, peer, keep, keep); err != nil {
			return err
		}
	}
	return nil
}

// doublingAllGather runs the halving steps backwards on an active rank that
// holds block VirtualRank() of buf: at the end it holds all of them.
func doublingAllGather(o *Op, h pattern.HalvingDoubling, buf []byte, count int) error {
	steps := h.Steps()
	for j := 0; j < steps; j++ {
		k := steps - 1 - j
		peer := h.Partner(k)
		keepLo, keepHi := h.Keep(k)
		sendLo, sendHi := h.Send(k)
		err := o.exchange(phaseDoubling, j, peer, spanBytes(o, buf, count, h.Pow2(), keepLo, keepHi),
			peer, spanBytes(o, buf, count, h.Pow2(), sendLo, sendHi), nil)
		if err != nil {
			return err
		}
	}
	return nil
}

// spanBytes returns the bytes of buf (count elements cut into parts blocks by
// pattern.Blocks) that blocks [lo, hi) cover.
func spanBytes(o *Op, buf []byte, count, parts, lo, hi int) []byte {
	off, l := pattern.BlockSpan(count, parts, lo, hi)
	es := o.esize()
	return buf[off*es : (off+l)*es]
}
