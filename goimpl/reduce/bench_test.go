package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// benchElements are the sizes of BenchmarkReduce and BenchmarkMemcpy: 4096 and 16384
// float32 elements (16 and 64 KiB per buffer) stay in L1 and L2; 1048576 (4 MiB per
// buffer) goes to L3 or memory.
var benchElements = []int{4096, 16384, 1 << 20}

// BenchmarkReduce runs each kernel in place, dst op= src, as a reduction step does.
// The bytes counted are 3*n*size: dst and src read, dst written. MB/s is decimal.
func BenchmarkReduce(b *testing.B) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, pr := range pairs() {
		dt, op := DType(pr[0]), Op(pr[1])
		if op == Avg {
			continue // the Sum kernel
		}
		for _, p := range runnablePaths(b) {
			for _, n := range benchElements {
				b.Run(fmt.Sprintf("%s/%s/%s/%d", dt, op, p.name, n), func(b *testing.B) {
					dst, src := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
					benchFill(rng, dt, dst, false)
					benchFill(rng, dt, src, op == Product)
					k := p.kernel2[dt][op]
					b.SetBytes(int64(3 * len(dst)))
					b.ResetTimer()
					for b.Loop() {
						k(dst, src)
					}
				})
			}
		}
	}
}

// BenchmarkMemcpy is the baseline: copy of n float32 elements. The bytes counted are
// 2*n*4, one read and one write, so that its MB/s compares with BenchmarkReduce's.
func BenchmarkMemcpy(b *testing.B) {
	for _, n := range benchElements {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dst, src := make([]byte, 4*n), make([]byte, 4*n)
			b.SetBytes(int64(2 * len(dst)))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// benchFill writes ordinary values: floats in [-1, 1) (exactly 1 for the src of a
// product, so that repeated products neither overflow nor reach the subnormals, which
// cost microcode assists on some CPUs), integers and bools from random bits.
func benchFill(rng *rand.Rand, dt DType, p []byte, one bool) {
	le := binary.LittleEndian
	s := dt.Size()
	for i := 0; i+s <= len(p); i += s {
		v := rng.Float64()*2 - 1
		if one {
			v = 1
		}
		switch dt {
		case Float32:
			le.PutUint32(p[i:], math.Float32bits(float32(v)))
		case Float64:
			le.PutUint64(p[i:], math.Float64bits(v))
		case Float16:
			le.PutUint16(p[i:], f32ToF16(float32(v)))
		case BFloat16:
			le.PutUint16(p[i:], f32ToBF16(float32(v)))
		case Bool:
			p[i] = byte(rng.Uint32() & 1)
		default:
			for j := range s {
				p[i+j] = byte(rng.Uint32())
			}
		}
	}
}

// BenchmarkDivide runs DivideInPlace by 3 on each path. Each iteration first copies
// the original values back, or repeated division would reach the subnormals (slow on
// some CPUs) and then zero; the time includes that copy. The bytes counted are
// 2*n*size: buf read and written by the division.
func BenchmarkDivide(b *testing.B) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, dt := range allDTypes {
		if dt == Bool {
			continue
		}
		for _, p := range runnablePaths(b) {
			for _, n := range benchElements {
				b.Run(fmt.Sprintf("%s/%s/%d", dt, p.name, n), func(b *testing.B) {
					orig, buf := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
					benchFill(rng, dt, orig, false)
					b.SetBytes(int64(2 * len(buf)))
					for b.Loop() {
						copy(buf, orig)
						p.Divide(dt, buf, 3)
					}
				})
			}
		}
	}
}
