package algo

import "unsafe"

// AllGatherRing gathers every rank's count elements into out (Size*count
// elements, rank i's block at i*count) with a ring: n-1 steps, each rank
// sends (n-1)/n of the output. in may alias out's own block.
func AllGatherRing(o *Op, in, out []byte, count int) error {
	es, r := o.esize(), o.Rank()
	own := out[r*count*es : (r+1)*count*es]
	if unsafe.SliceData(in) != unsafe.SliceData(own) {
		copy(own, in)
	}
	if o.Size() == 1 || count == 0 {
		return nil
	}
	return allGatherRing(o, out, count*o.Size())
}
