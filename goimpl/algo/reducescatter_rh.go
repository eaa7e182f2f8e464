package algo

import (
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// ReduceScatterRH is the recursive-halving reduce-scatter over
// pattern.HalvingDoubling: in holds Size blocks of count elements (block b
// is rank b's), and rank r ends with block r reduced over every rank in out.
// in is not modified.
//
// Terms: p = 2^floor(log2 n) active ranks, e = n-p folded pairs, as in
// AllReduceRHD. A virtual block is what one active rank ends with: virtual
// rank v stands for real ranks 2v and 2v+1 when v < e (it is rank 2v+1),
// for real rank v+e otherwise, so virtual block v is the run of real blocks
// pattern.HalvingDoubling.RealSpan(v, v+1), in index order. The halving
// steps of pattern.HalvingDoubling then run on virtual blocks instead of on
// p equal blocks.
//
//  1. Fold: the even rank 2i of a pair (i < e) sends its whole input to
//     2i+1, which reduces it with its own into the work buffer.
//  2. Halving step k = 0..log2(p)-1: swap the half of the held virtual
//     blocks the partner keeps for the other half, and reduce what arrives
//     into it: work = held op received (held is the input before the first
//     reduce, the work buffer after).
//  3. Unfold: rank 2i+1 ends holding real blocks 2i and 2i+1 and sends
//     block 2i to rank 2i.
//
// log2 p steps (+2 with folding). An active rank sends about (p-1)/p of the
// input (virtual blocks of folded pairs are twice as large, so ranks differ
// by up to 2x in bytes); a folding pair adds the whole input one way and one
// block back. The work buffer is o.Work, grown to the input's size.
func ReduceScatterRH(o *Op, in, out []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		if unsafe.SliceData(in) != unsafe.SliceData(out) {
			copy(out, in[:len(out)])
		}
		return nil
	}
	return reduceScatterRH(o, in, out, count, o.work(len(in)))
}

// reduceScatterRH is ReduceScatterRH with the work buffer given, len(in)
// bytes (a view cannot grow o.Work; see Op.work).
func reduceScatterRH(o *Op, in, out []byte, count int, work []byte) error {
	n, r := o.Size(), o.Rank()
	h := pattern.HalvingDoubling{Rank: r, Size: n}
	bb := count * o.esize()
	fp := h.FoldPartner()
	if !h.Active() {
		if err := o.exchange(phaseFold, 0, fp, in, fp, nil, nil); err != nil {
			return err
		}
		return o.exchange(phaseUnfold, 0, fp, nil, fp, out, nil)
	}
	// span returns the bytes of virtual blocks [vlo, vhi) in buf.
	span := func(buf []byte, vlo, vhi int) []byte {
		lo, hi := h.RealSpan(vlo, vhi)
		return buf[lo*bb : hi*bb]
	}
	held := in
	if fp >= 0 {
		if err := o.exchange(phaseFold, 0, fp, nil, fp, in, work); err != nil {
			return err
		}
		held = work
	}
	for k := 0; k < h.Steps(); k++ {
		keepLo, keepHi := h.Keep(k)
		sendLo, sendHi := h.Send(k)
		acc := span(work, keepLo, keepHi)
		if k == h.Steps()-1 && fp < 0 {
			acc = out // the last kept virtual block is this rank's block alone
		}
		peer := h.Partner(k)
		err := o.exchange(phaseHalving, k, peer, span(held, sendLo, sendHi), peer, span(held, keepLo, keepHi), acc)
		if err != nil {
			return err
		}
		held = work
	}
	if fp < 0 {
		return nil
	}
	// This rank is 2i+1 and holds real blocks 2i and 2i+1 in work.
	copy(out, work[r*bb:(r+1)*bb])
	return o.exchange(phaseUnfold, 0, fp, work[fp*bb:(fp+1)*bb], fp, nil, nil)
}
