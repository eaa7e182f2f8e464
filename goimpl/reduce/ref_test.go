package reduce

import (
	"encoding/binary"
	"math"
	"math/big"
)

// The reference below is written apart from the kernels, with different arithmetic
// where there is any: float32 and the half types through float64 and math.Ldexp,
// float64 through math/big, integers in int64 with explicit wrapping. The scalar path
// is checked against it; every other path is checked against the scalar path.

// refF16ToFloat decodes binary16 from its definition: (-1)^s * 2^(e-15) * 1.m, or
// 2^-14 * 0.m for e == 0.
func refF16ToFloat(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 31
	m := float64(h & 1023)
	switch {
	case e == 31 && m == 0:
		return s * math.Inf(1)
	case e == 31:
		return math.NaN()
	case e == 0:
		return s * math.Ldexp(m/1024, -14)
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

// refFloatToF16 finds the nearest binary16 to v (exact in float64), ties to even, by
// scaling v so that one binary16 unit in the last place is 1 and rounding there.
func refFloatToF16(v float64) uint16 {
	if math.IsNaN(v) {
		return 0x7e00
	}
	var sign uint16
	if math.Signbit(v) {
		sign = 0x8000
	}
	a := math.Abs(v)
	if a >= 65520 { // halfway between 65504, the largest binary16, and 65536
		return sign | 0x7c00
	}
	if a < math.Ldexp(1, -14) {
		return sign | uint16(math.RoundToEven(math.Ldexp(a, 24)))
	}
	_, exp := math.Frexp(a) // a = f * 2^exp, f in [0.5, 1)
	e := exp - 1
	m := math.RoundToEven((math.Ldexp(a, -e) - 1) * 1024)
	return sign | uint16(e+15)<<10 + uint16(m) // m == 1024 carries into the exponent
}

// refFloatToBF16 finds the nearest bfloat16 (8 significant bits) to a float32 value.
func refFloatToBF16(v float64) uint16 {
	if math.IsNaN(v) {
		return 0x7fc0
	}
	if v == 0 || math.IsInf(v, 0) {
		return uint16(math.Float32bits(float32(v)) >> 16)
	}
	_, exp := math.Frexp(math.Abs(v))
	e := max(exp-1, -126) // below 2^-126 the spacing stays that of the subnormals
	r := math.Ldexp(math.RoundToEven(math.Ldexp(v, 7-e)), e-7)
	if math.Abs(r) >= math.Ldexp(1, 128) {
		r = math.Copysign(math.Inf(1), v)
	}
	return uint16(math.Float32bits(float32(r)) >> 16) // r has 8 significant bits: exact
}

// refFloatOp returns x op y computed in float64. For float32 operands (the half types
// included) the caller rounds it to float32: rounding to float64 first and to float32
// after gives the correctly rounded sum or product, because 53 >= 2*24+2.
func refFloatOp(op Op, x, y float64) float64 {
	switch op {
	case Sum, Avg:
		return x + y
	case Product:
		return x * y
	case Min, Max:
		if math.IsNaN(x) || math.IsNaN(y) {
			return math.NaN()
		}
		if x == 0 && y == 0 {
			neg := math.Signbit(x) || math.Signbit(y)
			if op == Max {
				neg = math.Signbit(x) && math.Signbit(y)
			}
			if neg {
				return math.Copysign(0, -1)
			}
			return 0
		}
		if (op == Max) == (x > y) {
			return x
		}
		return y
	}
	panic("refFloatOp: " + op.String())
}

// refF64Op computes float64 sum and product through math/big, correctly rounded.
func refF64Op(op Op, x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) ||
		op != Sum && op != Product && op != Avg {
		return refFloatOp(op, x, y)
	}
	bx := new(big.Float).SetPrec(53).SetMode(big.ToNearestEven).SetFloat64(x)
	by := new(big.Float).SetPrec(53).SetMode(big.ToNearestEven).SetFloat64(y)
	r := new(big.Float).SetPrec(53).SetMode(big.ToNearestEven)
	if op == Product {
		r.Mul(bx, by)
	} else {
		r.Add(bx, by)
	}
	f, acc := r.Float64()
	if f == 0 && acc == big.Exact {
		// big.Float has no negative zero from Add of -x and x: IEEE gives +0, and
		// -0 + -0 is -0; a product keeps the sign of the operands.
		if op == Product {
			return math.Copysign(0, x) * math.Copysign(1, y)
		}
		if math.Signbit(x) && math.Signbit(y) {
			return math.Copysign(0, -1)
		}
		return 0
	}
	if math.IsInf(f, 0) || (f != 0 && math.Abs(f) < math.SmallestNonzeroFloat64*(1<<52)) {
		// Overflow and subnormal results: big.Float's exponent range is wider, so
		// fall back to the hardware, which rounds these correctly.
		if op == Product {
			return x * y
		}
		return x + y
	}
	return f
}

// refElement returns the reference result of one element, as bytes of dt.
func refElement(dt DType, op Op, a, b []byte) []byte {
	out := make([]byte, dt.Size())
	le := binary.LittleEndian
	switch dt {
	case Float32:
		x := float64(math.Float32frombits(le.Uint32(a)))
		y := float64(math.Float32frombits(le.Uint32(b)))
		le.PutUint32(out, math.Float32bits(float32(refFloatOp(op, x, y))))
	case Float64:
		le.PutUint64(out, math.Float64bits(refF64Op(op, math.Float64frombits(le.Uint64(a)), math.Float64frombits(le.Uint64(b)))))
	case Float16:
		x, y := refF16ToFloat(le.Uint16(a)), refF16ToFloat(le.Uint16(b))
		// Rounded to float32 first, then to binary16, as torch computes it.
		le.PutUint16(out, refFloatToF16(float64(float32(refFloatOp(op, x, y)))))
	case BFloat16:
		x := float64(math.Float32frombits(uint32(le.Uint16(a)) << 16))
		y := float64(math.Float32frombits(uint32(le.Uint16(b)) << 16))
		le.PutUint16(out, refFloatToBF16(float64(float32(refFloatOp(op, x, y)))))
	case Bool:
		x, y := a[0] != 0, b[0] != 0
		var r bool
		switch op {
		case Sum, Max, BOr:
			r = x || y
		case Product, Min, BAnd:
			r = x && y
		case BXor:
			r = x != y
		}
		if r {
			out[0] = 1
		}
	default:
		x, y := refInt(dt, a), refInt(dt, b)
		var r int64
		switch op {
		case Sum, Avg:
			r = x + y
		case Product:
			r = int64(uint64(x) * uint64(y)) // the low 64 bits are all that survive
		case Min:
			r = min(x, y)
		case Max:
			r = max(x, y)
		case BAnd:
			r = x & y
		case BOr:
			r = x | y
		case BXor:
			r = x ^ y
		}
		u := uint64(r) // the low dt.Size() bytes: two's-complement wrapping
		for i := range out {
			out[i] = byte(u >> (8 * uint(i)))
		}
	}
	return out
}

// refInt reads an integer element: signed for Int*, unsigned for Uint8.
func refInt(dt DType, p []byte) int64 {
	var u uint64
	for i := dt.Size() - 1; i >= 0; i-- {
		u = u<<8 | uint64(p[i])
	}
	if dt == Uint8 {
		return int64(u)
	}
	shift := 64 - uint(8*dt.Size())
	return int64(u<<shift) >> shift // sign-extend
}

// refDivide returns the reference for one element of DivideInPlace.
func refDivide(dt DType, p []byte, n int) []byte {
	out := make([]byte, dt.Size())
	if n == 1 {
		return append(out[:0], p...) // dividing by one leaves the buffer as it is
	}
	le := binary.LittleEndian
	switch dt {
	case Float32:
		le.PutUint32(out, math.Float32bits(float32(float64(math.Float32frombits(le.Uint32(p)))/float64(n))))
	case Float64:
		x := math.Float64frombits(le.Uint64(p))
		q := x / float64(n) // NaN, infinities, zeros and subnormal quotients: the hardware's
		if x != 0 && !math.IsNaN(x) && !math.IsInf(x, 0) && math.Abs(q) >= 0x1p-1022 {
			q, _ = new(big.Float).SetPrec(53).Quo(big.NewFloat(x), big.NewFloat(float64(n))).Float64()
		}
		le.PutUint64(out, math.Float64bits(q))
	case Float16:
		le.PutUint16(out, refFloatToF16(float64(float32(refF16ToFloat(le.Uint16(p))/float64(n)))))
	case BFloat16:
		x := float64(math.Float32frombits(uint32(le.Uint16(p)) << 16))
		le.PutUint16(out, refFloatToBF16(float64(float32(x/float64(n)))))
	default:
		q := uint64(refInt(dt, p) / int64(n))
		for i := range out {
			out[i] = byte(q >> (8 * uint(i)))
		}
	}
	return out
}
