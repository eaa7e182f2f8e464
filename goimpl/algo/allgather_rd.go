package algo

import (
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// AllGatherRD is the recursive-doubling allgather for a power-of-two group:
// at step j each rank swaps everything it has gathered so far with the rank
// 2^j away (the doubling steps of pattern.HalvingDoubling, run on the
// output's n blocks). log2 n steps; each
// rank sends (n-1)/n of the output, as the ring does, in far fewer steps.
// CanAllGatherRD says when it applies.
func AllGatherRD(o *Op, in, out []byte, count int) error {
	es, r, n := o.esize(), o.Rank(), o.Size()
	own := out[r*count*es : (r+1)*count*es]
	if unsafe.SliceData(in) != unsafe.SliceData(own) {
		copy(own, in)
	}
	if n == 1 || count == 0 {
		return nil
	}
	return doublingAllGather(o, pattern.HalvingDoubling{Rank: r, Size: n}, out, count*n)
}

// CanAllGatherRD reports whether AllGatherRD runs on n ranks: n must be a
// power of two, so that no rank folds and block v belongs to rank v.
func CanAllGatherRD(n int) bool { return n >= 1 && n&(n-1) == 0 }
