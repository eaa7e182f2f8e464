// Package reduce holds the element-wise reduction kernels of gohccl: one kernel per
// (dtype, op), over raw little-endian byte buffers that may start at any address, with
// a portable Go path for every pair and hand-written AVX2 and AVX-512 assembly on amd64,
// chosen once at start-up from the CPU's features.
//
// A collective calls Path.Lookup once per operation and then runs the returned kernel on
// every chunk; the kernels allocate nothing.
//
// # Semantics
//
// The results are those of torch on the CPU, so that the Python tests can use torch or
// numpy as the reference:
//
//   - Integers wrap on overflow (two's complement) for Sum and Product; Min and Max are
//     plain comparisons (signed for Int8..Int64, unsigned for Uint8).
//   - Float Min and Max return NaN when either input is NaN, as torch.minimum and
//     torch.maximum do. Negative zero orders below positive zero (IEEE 754-2019
//     minimum and maximum): Max(-0, +0) is +0 and Min(-0, +0) is -0 in either order.
//     torch itself answers differently in its vector loop and its scalar tail; an
//     order-independent answer matters more here, because a collective combines the
//     ranks' buffers in an order that depends on the algorithm.
//   - float16 and bfloat16 are widened to float32, combined there, and rounded once
//     back to nearest-even. A NaN stays a quiet NaN; its payload is not specified (a
//     bfloat16 NaN result is always 0x7fc0, torch's).
//   - Bool elements are one byte; any non-zero byte reads as true and results are
//     always 0 or 1. Sum, Max and BOr are logical or; Product, Min and BAnd logical and;
//     BXor is exclusive or.
//   - Bitwise ops take integer and bool buffers only; Avg reduces as Sum and the caller
//     divides once at the end with DivideInPlace.
//
// # Paths
//
// A path is a complete table of kernels for one instruction set: "scalar" (portable
// Go, every platform), "avx2" (AVX2 and F16C) and "avx512" (AVX-512 F, BW and DQ).
// Where a path has no assembly for a pair it uses the scalar kernel. Best returns the
// best path the CPU supports; PathNamed another (GOHCCL_SIMD). A path is a value each
// communicator holds, so communicators of one process may use different ones.
//
// docs/kernels.md gives the measured throughput of each path.
package reduce

//go:generate go run gen_scalar.go
//go:generate go run gen_asm.go

import (
	"fmt"
	"runtime"
	"strings"
)

// Kernel computes dst[i] = dst[i] op src[i] for the len(dst)/dt.Size() elements of
// dst; src must be at least as long as dst. Trailing bytes that do not fill an element
// are left alone.
type Kernel func(dst, src []byte)

// Kernel3 computes dst[i] = a[i] op b[i] for the len(dst)/dt.Size() elements of dst; a
// and b must be at least as long as dst. dst may be a or b exactly (the same start);
// it must not overlap them any other way.
type Kernel3 func(dst, a, b []byte)

const (
	numDTypes = int(Bool) + 1
	numOps    = int(Avg) + 1
)

// Path names, as SelectPath and GOHCCL_SIMD take them.
const (
	PathScalar = "scalar"
	PathAVX2   = "avx2"
	PathAVX512 = "avx512"
)

// Path is one complete kernel table. kernel2 wraps kernel3 once per pair at init, so
// that Lookup hands out both without allocating.
type Path struct {
	name    string
	kernel3 [numDTypes][numOps]Kernel3
	kernel2 [numDTypes][numOps]Kernel
	// divide holds DivideInPlace's vector forms, by dtype; nil means scalar.
	divide [numDTypes]func(buf []byte, n int)
	// missing names the CPU feature this machine lacks for the path, "" if none.
	missing string
}

// allPaths lists every path known to this build, worst first: scalar, then the
// assembly paths of the platform (paths_amd64.go).
var allPaths = append([]*Path{newPath(PathScalar, nil, "")}, platformPaths()...)

// best is the last path the CPU supports, found once.
var best = func() *Path {
	var b *Path
	for _, p := range allPaths {
		if p.missing == "" {
			b = p
		}
	}
	return b
}()

// newPath builds a path from its assembly kernels; nil entries fall back to scalar.
func newPath(name string, asm *[numDTypes][numOps]Kernel3, missing string) *Path {
	p := &Path{name: name, missing: missing}
	for dt := range numDTypes {
		for op := range numOps {
			if Check(DType(dt), Op(op)) != nil {
				continue
			}
			src := op
			if Op(op) == Avg {
				src = int(Sum)
			}
			k3 := scalarKernels[dt][src]
			if asm != nil && asm[dt][src] != nil {
				k3 = asm[dt][src]
			}
			if k3 == nil {
				panic(fmt.Sprintf("reduce: no scalar kernel for %s %s", DType(dt), Op(op)))
			}
			p.kernel3[dt][op] = k3
			p.kernel2[dt][op] = func(dst, src []byte) { k3(dst, dst, src) }
		}
	}
	return p
}

// Best returns the best path this CPU supports.
func Best() *Path { return best }

// Name returns the path's name, as GOHCCL_SIMD takes it.
func (p *Path) Name() string { return p.name }

// Lookup returns the kernels for (dt, op) on path p, or Check's error. Avg returns
// the Sum kernels: the caller divides with p.Divide after the last step.
func (p *Path) Lookup(dt DType, op Op) (Kernel, Kernel3, error) {
	if err := Check(dt, op); err != nil {
		return nil, nil, err
	}
	return p.kernel2[dt][op], p.kernel3[dt][op], nil
}

// Lookup is Best().Lookup.
func Lookup(dt DType, op Op) (Kernel, Kernel3, error) { return best.Lookup(dt, op) }

// Paths returns the names of the paths this CPU supports, best last.
func Paths() []string {
	var names []string
	for _, p := range allPaths {
		if p.missing == "" {
			names = append(names, p.name)
		}
	}
	return names
}

// PathNamed returns the path called name; "" and "auto" name the best one the CPU
// supports. It fails if the name is unknown or the CPU lacks a feature the path needs.
func PathNamed(name string) (*Path, error) {
	if name == "" || name == "auto" {
		return best, nil
	}
	p := pathByName(name)
	switch {
	case p == nil && (name == PathAVX2 || name == PathAVX512):
		return nil, fmt.Errorf("reduce: SIMD path %s needs an amd64 build; this one is %s (supported: %s)",
			name, runtime.GOARCH, strings.Join(Paths(), ", "))
	case p == nil:
		return nil, fmt.Errorf("reduce: unknown SIMD path %q (valid: auto, %s, %s, %s)",
			name, PathScalar, PathAVX2, PathAVX512)
	case p.missing != "":
		return nil, fmt.Errorf("reduce: SIMD path %s needs %s, which this CPU lacks (supported: %s)",
			name, p.missing, strings.Join(Paths(), ", "))
	}
	return p, nil
}

// pathByName returns the named path even if this CPU cannot run it, for tests.
func pathByName(name string) *Path {
	for _, p := range allPaths {
		if p.name == name {
			return p
		}
	}
	return nil
}
