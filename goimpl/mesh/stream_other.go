//go:build !amd64

package mesh

// stream is copy where no non-temporal copy is written (see stream_amd64.go).
func stream(dst, src []byte) { copy(dst, src) }
