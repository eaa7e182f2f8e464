package pattern

// Blocks splits count elements into parts contiguous blocks of nearly equal
// length and returns block i's offset and length: the first count%parts
// blocks hold count/parts+1 elements, the others count/parts. Blocks are in
// index order with no gaps, so block i+1 starts where block i ends and the
// last ends at count. When count < parts the trailing blocks are empty (their
// offset is count); count 0 gives parts empty blocks.
//
// It panics unless parts >= 1, count >= 0 and 0 <= i < parts: those are
// programming errors, like an index out of range.
func Blocks(count, parts, i int) (offset, length int) {
	if parts < 1 || count < 0 || i < 0 || i >= parts {
		panic("pattern.Blocks: need parts >= 1, count >= 0 and 0 <= i < parts")
	}
	offset = blockStart(count, parts, i)
	return offset, blockStart(count, parts, i+1) - offset
}

// BlockSpan returns the element range covered by blocks lo..hi-1 of
// Blocks(count, parts, .): the offset of block lo and the total length of the
// blocks up to, not including, hi. lo == hi gives an empty span. It panics
// unless parts >= 1, count >= 0 and 0 <= lo <= hi <= parts.
func BlockSpan(count, parts, lo, hi int) (offset, length int) {
	if parts < 1 || count < 0 || lo < 0 || lo > hi || hi > parts {
		panic("pattern.BlockSpan: need parts >= 1, count >= 0 and 0 <= lo <= hi <= parts")
	}
	offset = blockStart(count, parts, lo)
	return offset, blockStart(count, parts, hi) - offset
}

// blockStart returns the offset of block i, for 0 <= i <= parts; block parts
// "starts" at count. The first rem blocks are one element longer than the
// rest, so block i starts after i blocks of length q plus min(i, rem) extra
// elements.
func blockStart(count, parts, i int) int {
	q, rem := count/parts, count%parts
	return i*q + min(i, rem)
}
