package mesh

import "unsafe"

//go:noescape
func streamNT(dst, src *byte, n int)

// stream copies src into dst like copy, writing the bulk with
// non-temporal stores: the destination's lines go to memory without being
// read first (a normal store of a line not in cache reads it from memory)
// and without evicting what the caches hold. For outputs larger than the
// caches that nobody reads soon.
func stream(dst, src []byte) {
	n := min(len(dst), len(src))
	if n < 256 {
		copy(dst, src[:n])
		return
	}
	head := int(-uintptr(unsafe.Pointer(&dst[0])) & 15)
	copy(dst[:head], src[:head])
	bulk := (n - head) &^ 63
	streamNT(&dst[head], &src[head], bulk)
	copy(dst[head+bulk:n], src[head+bulk:n])
}
