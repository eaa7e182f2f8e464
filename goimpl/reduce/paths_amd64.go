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

// platformPaths returns the amd64 assembly paths, worst first, each with the CPU
// features it needs that this machine lacks. cpuid reports a feature only when the
// operating system also saves its registers (XCR0), so a kernel that runs without
// OS support for the YMM or ZMM state is not possible here.
func platformPaths() []*path {
	p512 := asmPath(PathAVX512, &avx512Kernels, missing(map[string]cpuid.FeatureID{
		"AVX512F": cpuid.AVX512F, "AVX512BW": cpuid.AVX512BW, "AVX512DQ": cpuid.AVX512DQ}))
	p512.manual = avx512Manual
	return []*path{
		asmPath(PathAVX2, &avx2Kernels, missing(map[string]cpuid.FeatureID{
			"AVX2": cpuid.AVX2, "F16C": cpuid.F16C})),
		p512,
	}
}

// avx512Manual keeps the avx512 path out of automatic selection. Its kernels come
// from the same generator as the avx2 ones and assemble, but the machines this was
// written on have no AVX-512, so no test has run them yet. Set it to false once
// `go test ./goimpl/reduce` has passed on an AVX-512 machine (TestPaths logs the paths
// it could not run).
const avx512Manual = true

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
func asmPath(name string, asm *[numDTypes][numOps]asmKernel, missing string) *path {
	var table [numDTypes][numOps]Kernel3
	for dt := range numDTypes {
		for op := range numOps {
			if k := asm[dt][op]; k.body != nil {
				table[dt][op] = wholeVectors(k, scalarKernels[dt][op], DType(dt).Size())
			}
		}
	}
	return newPath(name, &table, missing)
}

func wholeVectors(k asmKernel, tail Kernel3, size int) Kernel3 {
	body, step := k.body, k.step
	return func(dst, a, b []byte) {
		n := len(dst) / size * size
		vec := n &^ (step - 1)
		if vec > 0 {
			// The assembly trusts its length: make sure both operands hold it.
			_, _ = a[vec-1], b[vec-1]
			body(&dst[0], &a[0], &b[0], vec)
		}
		if vec < n {
			tail(dst[vec:n], a[vec:n], b[vec:n])
		}
	}
}
