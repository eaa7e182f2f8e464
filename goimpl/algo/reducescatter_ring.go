package algo

// ReduceScatterRing reduces in (Size*count elements) across ranks and leaves
// block r of the result in out (count elements) on rank r: n-1 ring steps,
// each rank sends (n-1)/n of the input. in is not modified.
func ReduceScatterRing(o *Op, in, out []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		copy(out, in[:len(out)])
		return nil
	}
	return reduceScatterRing(o, in, out, count*o.Size())
}
