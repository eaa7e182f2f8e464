package pattern

import "math/bits"

// ceilLog2 returns the smallest k with 1<<k >= n, for n >= 1.
func ceilLog2(n int) int {
	return bits.Len(uint(n - 1))
}

// floorPow2 returns the largest power of two <= n, for n >= 1.
func floorPow2(n int) int {
	return 1 << (bits.Len(uint(n)) - 1)
}

// lowBit returns the lowest set bit of x, for x >= 1.
func lowBit(x int) int {
	return x & -x
}

// wrap returns x mod n in [0, n). Peers and chunks of valid steps lie in
// (-n, 2n), where one compare and add or subtract does it without a
// division; other x take the division.
func wrap(x, n int) int {
	switch {
	case x < 0:
		x += n
	case x >= n:
		x -= n
	}
	if uint(x) >= uint(n) {
		x %= n
		if x < 0 {
			x += n
		}
	}
	return x
}
