//go:build !amd64

package reduce

// platformPaths returns no assembly paths: other platforms run the scalar kernels.
func platformPaths() []*path { return nil }
