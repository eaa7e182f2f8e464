package reduce

import "math"

// Half-precision conversions. float16 and bfloat16 are reduced by widening each element
// to float32 (exact for both), computing in float32 and rounding the result once back,
// to nearest with ties to even. That is what torch does on the CPU, and it is what the
// F16C and AVX-512 paths do in hardware, so every path gives the same bits.

// f16ToF32 widens an IEEE binary16 value. Every binary16 value, subnormals included, is
// exact in float32. A signalling NaN comes back quiet, as VCVTPH2PS returns it.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && mant != 0:
		return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000)
	case exp != 0:
		// Rebias the exponent from 15 to 127.
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant * 2^-24. Shift the leading one up to the implicit-bit position,
	// lowering the exponent of the smallest normal (2^-14) by one per shift.
	e := uint32(127 - 14)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// f32ToF16 rounds a float32 to binary16, to nearest with ties to even, as VCVTPS2PH
// does with rounding control 0: too large for binary16 becomes infinity, too small a
// signed zero or a subnormal, and a NaN stays a quiet NaN with its sign and the top of
// its payload.
func f32ToF16(f float32) uint16 {
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
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++ // a carry out of the mantissa bumps the exponent, up to infinity (0x7c00)
	}
	return sign | uint16(h)
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
