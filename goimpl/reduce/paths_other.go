//go:build !amd64 || purego

package reduce

// platformPaths returns no assembly paths: other platforms, and amd64 built with the
// purego tag, run the scalar kernels.
func platformPaths() []*Path { return nil }
