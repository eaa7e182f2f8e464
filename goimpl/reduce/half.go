package reduce

import "math"

// Half-precision conversions. float16 and bfloat16 are reduced by widening each element
// to float32 (exact for both), computing in float32 and rounding the result once back,
// to nearest with ties to even. That is what torch does on the CPU, and it is what the
// F16C and AVX-512 paths do in hardware, so every path gives the same bits.

// f16IsNormal reports whether h is a normal binary16 value (exponent neither 0 nor
// 31), the only kind f16ToF32Normal converts. The scalar loops call the pair directly,
// so that the common case inlines and only the rare one pays a call.
func f16IsNormal(h uint16) bool {
	return uint32(h&0x7fff)<<13-0x00800000 < 0x0f800000-0x00800000 // unsigned range check
}

// f16ToF32Normal widens a normal binary16 value: rebias the exponent from 15 to 127.
func f16ToF32Normal(h uint16) float32 {
	return math.Float32frombits(uint32(h&0x8000)<<16 | uint32(h&0x7fff)<<13 + (127-15)<<23)
}

// f16ToF32 widens an IEEE binary16 value. Every binary16 value, subnormals included, is
// exact in float32. A signalling NaN comes back quiet, as VCVTPH2PS returns it.
func f16ToF32(h uint16) float32 {
	if f16IsNormal(h) {
		return f16ToF32Normal(h)
	}
	return f16ToF32Rare(h)
}

// f16ToF32Rare widens any binary16 value, and is used for zeros, subnormals,
// infinities and NaNs.
func f16ToF32Rare(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	bits := uint32(h&0x7fff) << 13 // exponent and mantissa in float32 position
	switch exp := bits & 0x0f800000; exp {
	case 0x0f800000: // infinity or NaN: all-ones exponent, quiet bit set on NaN
		if bits&0x7fe000 != 0 {
			bits |= 0x400000
		}
		return math.Float32frombits(sign | 0x7f800000 | bits&0x7fe000)
	case 0:
		// Zero or subnormal, mant * 2^-24: give it the exponent of 2^-14 and the
		// implicit one, then subtract 2^-14 again; the subtraction is exact.
		f := math.Float32frombits(bits+(127-15+1)<<23) - math.Float32frombits((127-15+1)<<23)
		return math.Float32frombits(sign | math.Float32bits(f))
	}
	return math.Float32frombits(sign | bits + (127-15)<<23) // rebias the exponent
}

// f32FitsF16Normal reports whether f lies in binary16's normal range (before
// rounding), the only values f32ToF16Normal converts.
func f32FitsF16Normal(f float32) bool {
	t := math.Float32bits(f)&0x7fffffff - (127-15)<<23
	return t-0x00800000 < 0x0f800000-0x00800000 // 1 <= binary16 exponent <= 30, unsigned
}

// f32ToF16Normal rounds f, in binary16's normal range, to nearest even without a
// branch, which random data would mispredict half the time: add just under half a
// binary16 ulp plus the lowest kept bit, then drop the 13 extra bits. A carry bumps
// the exponent, up to infinity (0x7c00).
func f32ToF16Normal(f float32) uint16 {
	b := math.Float32bits(f)
	t := b&0x7fffffff - (127-15)<<23
	return uint16(b>>16)&0x8000 | uint16((t+0x0fff+(t>>13)&1)>>13)
}

// f32ToF16 rounds a float32 to binary16, to nearest with ties to even, as VCVTPS2PH
// does with rounding control 0: too large for binary16 becomes infinity, too small a
// signed zero or a subnormal, and a NaN stays a quiet NaN with its sign and the top of
// its payload.
func f32ToF16(f float32) uint16 {
	if f32FitsF16Normal(f) {
		return f32ToF16Normal(f)
	}
	return f32ToF16Rare(f)
}

// f32ToF16Rare rounds any float32 to binary16; f32ToF16 sends it the values outside
// binary16's normal range.
func f32ToF16Rare(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal in binary16: count units of 2^-24. The float32 value is
		// (2^23 + mant) * 2^(exp-150), that is (2^23 + mant) >> (126-exp) units.
		shift := uint(126 - exp)
		if shift > 24 {
			return sign // below half of the smallest subnormal: rounds to zero
		}
		m := mant | 0x800000
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || rem == half && q&1 == 1 {
			q++ // may become 0x400, the smallest normal, which is the right encoding
		}
		return sign | uint16(q)
	}
	// Round without a branch, which random data would mispredict half the time: add
	// just under half a binary16 ulp plus the lowest kept bit, then drop the 13 extra
	// bits. A carry out of the mantissa bumps the exponent, up to infinity (0x7c00).
	t := uint32(e)<<23 | mant
	return sign | uint16((t+0x0fff+(t>>13)&1)>>13)
}

// bf16ToF32 widens a bfloat16 value: it is the upper half of a float32.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// bfloat16NaN is the NaN that every rounding of a float32 NaN gives, the one torch's
// c10::BFloat16 gives.
const bfloat16NaN = 0x7fc0

// f32ToBF16 rounds a float32 to bfloat16, to nearest with ties to even. Adding 0x7fff
// plus the lowest kept bit and dropping the low half rounds every finite value and
// carries into infinity when it should; a NaN would be carried into infinity too, so
// it is replaced first.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return bfloat16NaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
