package mesh

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 70000)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, 255, 256, 257, 320, 1000, 4096, 65536 + 17} {
		for _, off := range []int{0, 1, 7, 15, 16, 33} {
			dst := make([]byte, n+off+64)
			for i := range dst {
				dst[i] = 0xaa
			}
			stream(dst[off:off+n], src[3:3+n])
			require.Equal(t, src[3:3+n], dst[off:off+n], "n %d off %d", n, off)
			for i := range off {
				require.Equal(t, byte(0xaa), dst[i])
			}
			for i := off + n; i < len(dst); i++ {
				require.Equal(t, byte(0xaa), dst[i], "n %d off %d: wrote past the end", n, off)
			}
		}
	}
}
