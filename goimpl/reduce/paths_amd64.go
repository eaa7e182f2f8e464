//go:build !purego

package reduce

import (
	"strings"

	"github.com/klauspost/cpuid/v2"
)

// asmKernel is one assembly kernel: body computes dst = a op b over n bytes, n a
// multiple of step (one vector's worth of each operand, a power of two).
type asmKernel struct {
	body func(dst, a, b *byte, n int)
	step int
}

// asmDivide is one assembly kernel of DivideInPlace: buf[i] /= d over n bytes, n a
// multiple of step. Float64 has f64; the other float types divide in float32 (f32).
type asmDivide struct {
	f32  func(buf *byte, n int, d float32)
	f64  func(buf *byte, n int, d float64)
	step int
}

// platformPaths returns the amd64 assembly paths, worst first, each with the CPU
// features it needs that this machine lacks. cpuid reports a feature only when the
// operating system also saves its registers (XCR0), so a kernel that runs without
// OS support for the YMM or ZMM state is not possible here.
func platformPaths() []*Path {
	return []*Path{
		asmPath(PathAVX2, &avx2Kernels, &avx2Divides, missing(map[string]cpuid.FeatureID{
			"AVX2": cpuid.AVX2, "F16C": cpuid.F16C})),
		asmPath(PathAVX512, &avx512Kernels, &avx512Divides, missing(map[string]cpuid.FeatureID{
			"AVX512F": cpuid.AVX512F, "AVX512BW": cpuid.AVX512BW, "AVX512DQ": cpuid.AVX512DQ})),
	}
}

// missing names the features of need that this CPU lacks, "" if none.
func missing(need map[string]cpuid.FeatureID) string {
	var lack []string
	for _, name := range []string{"AVX2", "F16C", "AVX512F", "AVX512BW", "AVX512DQ"} {
		if id, ok := need[name]; ok && !cpuid.CPU.Supports(id) {
			lack = append(lack, name)
		}
	}
	if len(lack) < 2 {
		return strings.Join(lack, "")
	}
	return strings.Join(lack[:len(lack)-1], ", ") + " and " + lack[len(lack)-1]
}

// asmPath wraps each assembly kernel so that it sees only whole vectors; the scalar
// kernel finishes the rest, fewer than one vector's worth of elements.
func asmPath(name string, asm *[numDTypes][numOps]asmKernel, div *[numDTypes]asmDivide, missing string) *Path {
	var table [numDTypes][numOps]Kernel3
	for dt := range numDTypes {
		for op := range numOps {
			if k := asm[dt][op]; k.body != nil {
				table[dt][op] = wholeVectors(k, scalarKernels[dt][op], DType(dt).Size())
			}
		}
	}
	p := newPath(name, &table, missing)
	for dt := range numDTypes {
		if d := div[dt]; d.step != 0 {
			p.divide[dt] = divideWholeVectors(DType(dt), d)
		}
	}
	return p
}

// maxAsmBytes bounds the bytes one assembly call covers. Assembly is not
// preemptible, so a long call would hold off a stop-the-world of the garbage
// collector; 256 KiB takes some microseconds, and the extra call per 256 KiB is
// noise. A multiple of every step.
const maxAsmBytes = 256 << 10

func wholeVectors(k asmKernel, tail Kernel3, size int) Kernel3 {
	body, step := k.body, k.step
	return func(dst, a, b []byte) {
		n := len(dst) / size * size
		vec := n &^ (step - 1)
		if vec > 0 {
			// The assembly trusts its length: make sure both operands hold it.
			_, _ = a[vec-1], b[vec-1]
			for off := 0; off < vec; off += maxAsmBytes {
				body(&dst[off], &a[off], &b[off], min(maxAsmBytes, vec-off))
			}
		}
		if vec < n {
			tail(dst[vec:n], a[vec:n], b[vec:n])
		}
	}
}

// divideWholeVectors wraps a division kernel like wholeVectors: assembly for whole
// vectors, in bounded calls, and the scalar division for the rest.
func divideWholeVectors(dt DType, d asmDivide) func(buf []byte, n int) {
	size := dt.Size()
	return func(buf []byte, n int) {
		all := len(buf) / size * size
		vec := all &^ (d.step - 1)
		for off := 0; off < vec; off += maxAsmBytes {
			c := min(maxAsmBytes, vec-off)
			if d.f64 != nil {
				d.f64(&buf[off], c, float64(n))
			} else {
				d.f32(&buf[off], c, float32(n))
			}
		}
		divideScalar(dt, buf[vec:all], n)
	}
}
