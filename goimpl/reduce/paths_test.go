package reduce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// runnablePaths returns the paths this CPU can run, scalar included: a path the CPU
// lacks is reported as skipped rather than silently left out.
func runnablePaths(t testing.TB) []*Path {
	var ps []*Path
	for _, p := range allPaths {
		if p.missing != "" {
			t.Logf("path %s not tested here: this CPU lacks %s", p.name, p.missing)
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// guard is the byte pattern around every output, to catch a kernel writing outside dst.
const guard = 0xa7

// testLengths are the element counts of TestPaths: every count up to 257 covers every
// combination of unrolled loop, single-vector loop and scalar tail; the larger ones
// cover long runs of the unrolled loop with odd tails.
func testLengths() []int {
	var ns []int
	for n := range 258 {
		ns = append(ns, n)
	}
	return append(ns, 1000, 4099, 65536+7)
}

// TestPaths checks every path x dtype x op against the scalar kernel, itself checked
// against the reference in TestScalarAgainstReference: for every length, at start
// offsets 0..7 bytes apart in dst, a and b, in the three aliasing forms a collective
// uses (dst = a op b, dst op= src through Kernel, dst = a op dst).
func TestPaths(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range runnablePaths(t) {
		if p.name == PathScalar {
			continue
		}
		for _, pr := range pairs() {
			dt, op := DType(pr[0]), Op(pr[1])
			t.Run(fmt.Sprintf("%s/%s/%s", p.name, dt, op), func(t *testing.T) {
				checkPath(t, rng, p, dt, op, testLengths())
			})
		}
	}
}

func checkPath(t testing.TB, rng *rand.Rand, p *Path, dt DType, op Op, lengths []int) {
	s := dt.Size()
	maxN := lengths[len(lengths)-1]
	const pad = 16
	aBuf, bBuf := make([]byte, maxN*s+pad), make([]byte, maxN*s+pad)
	fill(rng, dt, aBuf)
	fill(rng, dt, bBuf)
	want := make([]byte, maxN*s)
	out := make([]byte, maxN*s+2*pad+8)
	ref := scalarKernel(dt, op)
	k2, k3 := p.kernel2[dt][op], p.kernel3[dt][op]
	for i, n := range lengths {
		offA, offB, offD := i%8, (i/8)%8, (i*3)%8
		a, b := aBuf[offA:offA+n*s], bBuf[offB:offB+n*s]
		ref(want[:n*s], a, b)

		window := out[:2*pad+offD+n*s]
		for i := range window {
			window[i] = guard
		}
		dst := window[pad+offD : pad+offD+n*s]
		k3(dst, a, b)
		requireSame(t, dt, op, dst, want[:n*s], a, b, p.name+" kernel3")
		checkGuard(t, window, pad+offD, n*s, p.name)

		// In place through Kernel: dst starts as a copy of a.
		copy(dst, a)
		k2(dst, b)
		requireSame(t, dt, op, dst, want[:n*s], a, b, p.name+" kernel in place")
		checkGuard(t, window, pad+offD, n*s, p.name)

		// dst aliasing the second operand.
		copy(dst, b)
		k3(dst, a, dst)
		requireSame(t, dt, op, dst, want[:n*s], a, b, p.name+" kernel3 dst=b")
	}
}

// checkGuard checks that window holds the guard outside [start, start+n).
func checkGuard(t testing.TB, window []byte, start, n int, name string) {
	t.Helper()
	for i, v := range window {
		if (i < start || i >= start+n) && v != guard {
			t.Fatalf("%s wrote byte %d outside dst [%d, %d)", name, i, start, start+n)
		}
	}
}

// TestPathsSpecialPairs runs every pair of special values (zeros of both signs, NaN,
// infinities, subnormals, integer extremes) through every path, rotated so that each
// pair passes through every position: the unrolled loop, the one-vector loop, the
// scalar tail.
func TestPathsSpecialPairs(t *testing.T) {
	for _, p := range runnablePaths(t) {
		if p.name == PathScalar {
			continue
		}
		for _, pr := range pairs() {
			dt, op := DType(pr[0]), Op(pr[1])
			s := dt.Size()
			sp := specials(dt)
			var a, b []byte
			for _, x := range sp {
				for _, y := range sp {
					a = append(a, x...)
					b = append(b, y...)
				}
			}
			n := len(a)
			a2, b2 := append(bytes.Clone(a), a...), append(bytes.Clone(b), b...)
			got, want := make([]byte, n), make([]byte, n)
			for r := 0; r < n; r += s {
				// Shorten as well as rotate, so that the one-vector loop and the tail
				// see every pair too, not only the unrolled loop.
				m := n - (r/s*31)%(n/s/2+1)*s // 31 keeps the shortening from tracking the rotation
				ra, rb := a2[r:r+m], b2[r:r+m]
				scalarKernel(dt, op)(want[:m], ra, rb)
				p.kernel3[dt][op](got[:m], ra, rb)
				requireSame(t, dt, op, got[:m], want[:m], ra, rb, fmt.Sprintf("%s rotated by %d", p.name, r/s))
			}
		}
	}
}

// TestPathsDivide checks each path's DivideInPlace against the scalar division over
// every length 0..257 and some beyond one assembly call (maxAsmBytes), at unaligned
// starts, on special values and random bits.
func TestPathsDivide(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, p := range runnablePaths(t) {
		for _, dt := range []DType{Float32, Float64, Float16, BFloat16} {
			if p.divide[dt] == nil {
				continue
			}
			s := dt.Size()
			lengths := append(testLengths(), (600<<10)/s+5)
			buf := make([]byte, lengths[len(lengths)-1]*s+8)
			for i, count := range lengths {
				off := i % 8
				for _, n := range []int{2, 3, 1000} {
					fill(rng, dt, buf[off:off+count*s])
					orig := bytes.Clone(buf[off : off+count*s])
					want := bytes.Clone(orig)
					divideScalar(dt, want, n)
					got := buf[off : off+count*s]
					p.divide[dt](got, n)
					requireSame(t, dt, Avg, got, want, orig, orig, fmt.Sprintf("%s divide by %d", p.name, n))
				}
			}
		}
	}
}

// TestPathsLarge runs the unrolled loops over a megabyte-sized buffer per pair.
func TestPathsLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, p := range runnablePaths(t) {
		if p.name == PathScalar {
			continue
		}
		for _, dt := range allDTypes {
			n := (1<<20)/dt.Size() + 3
			checkPath(t, rng, p, dt, Sum, []int{n})
			checkPath(t, rng, p, dt, Max, []int{n})
		}
	}
}

// FuzzPaths feeds arbitrary bytes to every path and compares each with scalar.
func FuzzPaths(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, pr := range pairs() {
		dt := DType(pr[0])
		a, b := make([]byte, 67*dt.Size()), make([]byte, 67*dt.Size())
		fill(rng, dt, a)
		fill(rng, dt, b)
		f.Add(pr[0], pr[1], uint8(3), a, b)
	}
	f.Add(uint8(Float16), uint8(Max), uint8(0), []byte{0x00, 0x80, 0x01, 0x7c}, []byte{0x00, 0x00, 0x00, 0x7c})
	f.Fuzz(func(t *testing.T, dtb, opb, off uint8, a, b []byte) {
		dt, op := DType(dtb), Op(opb)
		if Check(dt, op) != nil {
			return
		}
		n := min(len(a), len(b))
		skip := min(int(off%8), n)
		a, b = a[skip:n], b[skip:n]
		want := make([]byte, len(a))
		scalarKernel(dt, op)(want, a, b)
		if dt == Bool {
			for i, v := range want {
				if v > 1 {
					t.Fatalf("scalar bool %s gave %d at %d", op, v, i)
				}
			}
		}
		for _, p := range runnablePaths(t) {
			got := make([]byte, len(a))
			p.kernel3[dt][op](got, a, b)
			requireSame(t, dt, op, got, want, a, b, p.name)
			inPlace := bytes.Clone(a)
			p.kernel2[dt][op](inPlace, b)
			requireSame(t, dt, op, inPlace, want, a, b, p.name+" in place")
		}
	})
}
