package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allDTypes = []DType{Float32, Float64, Float16, BFloat16, Int8, Uint8, Int16, Int32, Int64, Bool}
var allOps = []Op{Sum, Product, Min, Max, BAnd, BOr, BXor, Avg}

// pairs returns every supported (dtype, op).
func pairs() [][2]uint8 {
	var ps [][2]uint8
	for _, dt := range allDTypes {
		for _, op := range allOps {
			if Check(dt, op) == nil {
				ps = append(ps, [2]uint8{uint8(dt), uint8(op)})
			}
		}
	}
	return ps
}

func TestDTypeAndOpNames(t *testing.T) {
	sizes := map[DType]int{Float32: 4, Float64: 8, Float16: 2, BFloat16: 2, Int8: 1, Uint8: 1, Int16: 2, Int32: 4, Int64: 8, Bool: 1}
	names := map[DType]string{Float32: "float32", Float64: "float64", Float16: "float16", BFloat16: "bfloat16",
		Int8: "int8", Uint8: "uint8", Int16: "int16", Int32: "int32", Int64: "int64", Bool: "bool"}
	for dt, size := range sizes {
		assert.True(t, dt.Valid(), dt)
		assert.Equal(t, size, dt.Size(), dt)
		assert.Equal(t, names[dt], dt.String())
		assert.Equal(t, dt <= BFloat16, dt.IsFloat(), dt)
	}
	bad := DType(17)
	assert.False(t, bad.Valid())
	assert.Equal(t, 0, bad.Size())
	assert.Equal(t, "dtype(17)", bad.String())
	assert.False(t, bad.IsFloat())

	want := []string{"sum", "product", "min", "max", "band", "bor", "bxor", "avg"}
	for i, name := range want {
		assert.True(t, Op(i).Valid())
		assert.Equal(t, name, Op(i).String())
	}
	assert.False(t, Op(8).Valid())
	assert.Equal(t, "op(8)", Op(8).String())
}

func TestCheck(t *testing.T) {
	assert.EqualError(t, Check(Float32, BAnd),
		"reduce: op band is not defined for float32 (bitwise ops take integer or bool tensors)")
	assert.EqualError(t, Check(BFloat16, BXor),
		"reduce: op bxor is not defined for bfloat16 (bitwise ops take integer or bool tensors)")
	assert.ErrorContains(t, Check(Bool, Avg), "avg")
	assert.ErrorContains(t, Check(DType(12), Sum), "dtype(12)")
	assert.ErrorContains(t, Check(Int32, Op(9)), "op(9)")
	for _, dt := range allDTypes {
		for _, op := range []Op{Sum, Product, Min, Max} {
			assert.NoError(t, Check(dt, op))
		}
		if !dt.IsFloat() {
			for _, op := range []Op{BAnd, BOr, BXor} {
				assert.NoError(t, Check(dt, op))
			}
		}
		if dt != Bool {
			assert.NoError(t, Check(dt, Avg))
		}
	}
	_, _, err := Lookup(Float64, BOr)
	assert.Error(t, err)
}

// sameElement reports whether two elements of dt are equal, any NaN matching any NaN
// where the NaN payload is not part of the contract (every float type but bfloat16,
// whose NaN results are always 0x7fc0).
func sameElement(dt DType, x, y []byte) bool {
	if bytes.Equal(x, y) {
		return true
	}
	return dt != BFloat16 && isNaN(dt, x) && isNaN(dt, y)
}

func isNaN(dt DType, p []byte) bool {
	le := binary.LittleEndian
	switch dt {
	case Float32:
		return le.Uint32(p)&0x7fffffff > 0x7f800000
	case Float64:
		return le.Uint64(p)&(1<<63-1) > 0x7ff0000000000000
	case Float16:
		return le.Uint16(p)&0x7fff > 0x7c00
	case BFloat16:
		return le.Uint16(p)&0x7fff > 0x7f80
	}
	return false
}

// requireSame fails with the first differing element, described with its inputs.
func requireSame(t testing.TB, dt DType, op Op, got, want, a, b []byte, what string) {
	t.Helper()
	s := dt.Size()
	for i := 0; i+s <= len(want); i += s {
		if !sameElement(dt, got[i:i+s], want[i:i+s]) {
			t.Fatalf("%s %s %s: element %d of %d: %x op %x = %x, want %x",
				what, dt, op, i/s, len(want)/s, a[i:i+s], b[i:i+s], got[i:i+s], want[i:i+s])
		}
	}
}

// specials returns the values of dt that the kernels must get right at the edges.
func specials(dt DType) [][]byte {
	var out [][]byte
	le := binary.LittleEndian
	put := func(size int, v uint64) {
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(v >> (8 * uint(i)))
		}
		out = append(out, p)
	}
	switch dt {
	case Float32:
		for _, v := range []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
			1, 0x80000001, 0x007fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000, 0x3f800001} {
			put(4, uint64(v))
		}
	case Float64:
		for _, v := range []uint64{0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000,
			0x7ff0000000000001, 1, 0x000fffffffffffff, 0x7fefffffffffffff, 0x3ff0000000000000, 0xbff0000000000001} {
			put(8, v)
		}
	case Float16:
		for _, v := range []uint16{0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01, 1, 0x8001, 0x03ff, 0x0400,
			0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x3bff} {
			put(2, uint64(v))
		}
	case BFloat16:
		for _, v := range []uint16{0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 1, 0x8001, 0x007f, 0x0080,
			0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81} {
			put(2, uint64(v))
		}
	case Bool:
		for _, v := range []byte{0, 1, 0, 1, 2, 255} {
			put(1, uint64(v))
		}
	default:
		bits := 8 * dt.Size()
		for _, v := range []int64{0, 1, -1, 2, -2, 3, math.MinInt64 >> (64 - bits), math.MaxInt64 >> (64 - bits)} {
			put(dt.Size(), uint64(v))
		}
		_ = le
	}
	return out
}

// fill writes n elements of dt into p: about a third special values, the rest random
// bits (for floats that covers every exponent, for integers every overflow).
func fill(rng *rand.Rand, dt DType, p []byte) {
	sp := specials(dt)
	s := dt.Size()
	for i := 0; i+s <= len(p); i += s {
		if rng.IntN(3) == 0 {
			copy(p[i:], sp[rng.IntN(len(sp))])
			continue
		}
		for j := range s {
			p[i+j] = byte(rng.Uint32())
		}
		if dt == Bool {
			p[i] &= 1
		}
	}
}

func TestScalarAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 4096
	for _, pr := range pairs() {
		dt, op := DType(pr[0]), Op(pr[1])
		t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
			s := dt.Size()
			a, b, got := make([]byte, n*s), make([]byte, n*s), make([]byte, n*s)
			fill(rng, dt, a)
			fill(rng, dt, b)
			// Every pair of special values, then random ones.
			sp := specials(dt)
			k := 0
			for _, x := range sp {
				for _, y := range sp {
					copy(a[k*s:], x)
					copy(b[k*s:], y)
					k++
				}
			}
			scalarKernel(dt, op)(got, a, b)
			want := make([]byte, 0, n*s)
			for i := 0; i < n*s; i += s {
				want = append(want, refElement(dt, op, a[i:i+s], b[i:i+s])...)
			}
			requireSame(t, dt, op, got, want, a, b, "scalar")
		})
	}
}

// scalarKernel returns the portable kernel, whatever the active path.
func scalarKernel(dt DType, op Op) Kernel3 { return pathByName(PathScalar).kernel3[dt][op] }

func TestHalfConversions(t *testing.T) {
	for h := range 1 << 16 {
		got := f16ToF32(uint16(h))
		want := refF16ToFloat(uint16(h))
		if math.IsNaN(want) {
			require.True(t, got != got, "f16ToF32(%#04x) = %v, want NaN", h, got)
			require.Equal(t, uint16(h)|0x200, f32ToF16(got), "NaN %#04x does not come back quiet", h)
			continue
		}
		require.Equal(t, want, float64(got), "f16ToF32(%#04x)", h)
		require.Equal(t, uint16(h), f32ToF16(got), "round trip of %#04x", h)

		gotBF := bf16ToF32(uint16(h))
		if gotBF == gotBF {
			require.Equal(t, uint16(h), f32ToBF16(gotBF), "bfloat16 round trip of %#04x", h)
		} else {
			require.Equal(t, uint16(bfloat16NaN), f32ToBF16(gotBF))
		}
	}

	// Ties and near-ties: for each binary16 value, the float32 values one ulp around
	// the midpoint to the next one.
	check := func(b uint32) {
		f := math.Float32frombits(b)
		want := refFloatToF16(float64(f))
		got := f32ToF16(f)
		if f != f {
			require.True(t, got&0x7fff > 0x7c00, "f32ToF16(%#08x) = %#04x, want a NaN", b, got)
		} else {
			require.Equal(t, want, got, "f32ToF16(%#08x = %g)", b, f)
		}
		wantBF := refFloatToBF16(float64(f))
		require.Equal(t, wantBF, f32ToBF16(f), "f32ToBF16(%#08x = %g)", b, f)
	}
	for h := range 0x7c00 {
		lo, hi := float64(f16ToF32(uint16(h))), refF16ToFloat(uint16(h+1))
		mid := math.Float32bits(float32((lo + hi) / 2)) // exact: binary16 midpoints fit float32
		for _, b := range []uint32{mid - 1, mid, mid + 1} {
			check(b)
			check(b | 0x80000000)
		}
	}
	for b := uint32(0x7f7f0000); b < 0x7f800000; b += 0x1000 {
		check(b) // the bfloat16 overflow edge
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		check(rng.Uint32())
	}
	for b := uint32(0); b < 0x20000; b += 7 {
		check(b) // float32 subnormals through bfloat16 subnormals
	}
}

func TestDivideInPlace(t *testing.T) {
	for _, p := range runnablePaths(t) {
		testDivideInPlace(t, p)
	}
}

func testDivideInPlace(t *testing.T, p *Path) {
	pathName := p.Name()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range allDTypes {
		if dt == Bool {
			continue
		}
		for _, n := range []int{1, 2, 3, 7, 8, 1000, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%s/%d", pathName, dt, n), func(t *testing.T) {
				s := dt.Size()
				buf := make([]byte, 512*s+s-1) // a trailing partial element stays untouched
				fill(rng, dt, buf[:512*s])
				for i := 512 * s; i < len(buf); i++ {
					buf[i] = 0xa5
				}
				want := make([]byte, 0, len(buf))
				for i := 0; i < 512*s; i += s {
					want = append(want, refDivide(dt, buf[i:i+s], n)...)
				}
				orig := bytes.Clone(buf)
				p.Divide(dt, buf, n)
				requireSame(t, dt, Avg, buf[:512*s], want, orig, orig, "divide")
				assert.Equal(t, orig[512*s:], buf[512*s:])
			})
		}
	}
	assert.Panics(t, func() { p.Divide(Float32, make([]byte, 8), 0) }, pathName)
	// Truncation toward zero, not floor.
	b := []byte{0xf9} // int8 -7
	p.Divide(Int8, b, 2)
	assert.Equal(t, byte(0xfd), b[0]) // -3
}

func TestPathNamed(t *testing.T) {
	paths := Paths()
	require.NotEmpty(t, paths)
	assert.Equal(t, PathScalar, paths[0])
	auto := Best().Name()
	assert.Equal(t, paths[len(paths)-1], auto, "auto runs the best path this CPU supports")
	switch {
	case containsName(paths, PathAVX512):
		assert.Equal(t, PathAVX512, auto, "an AVX-512 machine runs avx512 unless told otherwise")
	case containsName(paths, PathAVX2):
		assert.Equal(t, PathAVX2, auto, "an AVX2 machine runs avx2 unless told otherwise")
	}
	for _, name := range paths {
		p, err := PathNamed(name)
		require.NoError(t, err)
		assert.Equal(t, name, p.Name())
	}
	_, err := PathNamed("sse9")
	assert.EqualError(t, err, `reduce: unknown SIMD path "sse9" (valid: auto, scalar, avx2, avx512)`)
	for _, name := range []string{PathAVX2, PathAVX512} {
		if !containsName(paths, name) {
			_, err := PathNamed(name)
			require.Error(t, err)
			assert.Contains(t, err.Error(), name)
			t.Logf("%s unavailable: %v", name, err)
		}
	}
	for _, name := range []string{"", "auto"} {
		p, err := PathNamed(name)
		require.NoError(t, err)
		assert.Equal(t, auto, p.Name())
	}
}

func containsName(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestLookupAllocatesNothing(t *testing.T) {
	dst, src := make([]byte, 4096), make([]byte, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		k, k3, err := Lookup(Float16, Sum)
		if err != nil {
			panic(err)
		}
		k(dst, src)
		k3(dst, dst, src)
		DivideInPlace(Float16, dst, 3)
	})
	assert.Zero(t, allocs)
}
