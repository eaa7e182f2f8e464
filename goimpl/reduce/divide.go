package reduce

import (
	"fmt"
	"math"
)

// truth reads a bool element: any non-zero byte is true, and true is 1.
func truth(b byte) byte {
	if b != 0 {
		return 1
	}
	return 0
}

// DivideInPlace divides every one of the len(buf)/dt.Size() elements of buf by n, to
// finish an Avg. Floats are divided exactly as the hardware divides (float16 and
// bfloat16 in float32, rounded once to nearest-even); integers truncate toward zero,
// as torch's integer division of a sum by the group size does with trunc rounding.
// Bool is refused by Check(Bool, Avg) and left alone here. n must be at least 1: a
// divisor below 1 is a bug in the caller, and DivideInPlace panics rather than
// writing a wrong average. It runs on the best path; Path.Divide on another.
func DivideInPlace(dt DType, buf []byte, n int) { best.Divide(dt, buf, n) }

// Divide is DivideInPlace on path p.
func (p *Path) Divide(dt DType, buf []byte, n int) {
	if n < 1 {
		panic(fmt.Sprintf("reduce: DivideInPlace of %s by %d; the divisor is a group size, at least 1", dt, n))
	}
	if n == 1 {
		return
	}
	if d := p.divide[dt]; d != nil {
		d(buf, n)
		return
	}
	divideScalar(dt, buf, n)
}

// divideScalar is the portable DivideInPlace, for n > 1.
func divideScalar(dt DType, buf []byte, n int) {
	switch dt {
	case Float32:
		d := float32(n)
		for i := 0; i+4 <= len(buf); i += 4 {
			le.PutUint32(buf[i:], math.Float32bits(math.Float32frombits(le.Uint32(buf[i:]))/d))
		}
	case Float64:
		d := float64(n)
		for i := 0; i+8 <= len(buf); i += 8 {
			le.PutUint64(buf[i:], math.Float64bits(math.Float64frombits(le.Uint64(buf[i:]))/d))
		}
	case Float16:
		d := float32(n)
		for i := 0; i+2 <= len(buf); i += 2 {
			le.PutUint16(buf[i:], f32ToF16(f16ToF32(le.Uint16(buf[i:]))/d))
		}
	case BFloat16:
		d := float32(n)
		for i := 0; i+2 <= len(buf); i += 2 {
			le.PutUint16(buf[i:], f32ToBF16(bf16ToF32(le.Uint16(buf[i:]))/d))
		}
	case Int8:
		d := int64(n)
		for i := range buf {
			buf[i] = byte(int64(int8(buf[i])) / d)
		}
	case Uint8:
		d := uint64(n)
		for i := range buf {
			buf[i] = byte(uint64(buf[i]) / d)
		}
	case Int16:
		d := int64(n)
		for i := 0; i+2 <= len(buf); i += 2 {
			le.PutUint16(buf[i:], uint16(int64(int16(le.Uint16(buf[i:])))/d))
		}
	case Int32:
		d := int64(n)
		for i := 0; i+4 <= len(buf); i += 4 {
			le.PutUint32(buf[i:], uint32(int64(int32(le.Uint32(buf[i:])))/d))
		}
	case Int64:
		d := int64(n)
		for i := 0; i+8 <= len(buf); i += 8 {
			le.PutUint64(buf[i:], uint64(int64(le.Uint64(buf[i:]))/d))
		}
	}
}
