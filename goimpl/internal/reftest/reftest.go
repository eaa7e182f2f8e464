// Package reftest holds the test data and the independent reference that the
// algorithm and communicator tests share: small-integer inputs, so that float
// sums are exact in any order, and an elementwise reduce that uses none of
// the library's kernels.
package reftest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/gohccl/gohccl/goimpl/reduce"
)

// Ints is rank r's deterministic data: count integers in [-9, 9].
func Ints(r, count, salt int) []int64 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(salt)))
	v := make([]int64, count)
	for i := range v {
		v[i] = rng.Int64N(19) - 9
	}
	return v
}

// Encode lays v out as dt elements (int32, int64, float32 or float64).
// Integers wrap as two's complement, as the kernels do.
func Encode(dt reduce.DType, v []int64) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case reduce.Int32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
		case reduce.Int64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		case reduce.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
		case reduce.Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(x)))
		default:
			panic("reftest encodes int32, int64, float32, float64")
		}
	}
	return b
}

// Reduce combines the ranks' inputs elementwise with Sum, Max, Min or
// Product.
func Reduce(op reduce.Op, inputs [][]int64) []int64 {
	out := append([]int64(nil), inputs[0]...)
	for _, in := range inputs[1:] {
		for i, x := range in {
			switch op {
			case reduce.Sum:
				out[i] += x
			case reduce.Max:
				out[i] = max(out[i], x)
			case reduce.Min:
				out[i] = min(out[i], x)
			case reduce.Product:
				out[i] *= x
			default:
				panic("reftest reduces sum, max, min, product")
			}
		}
	}
	return out
}

// OnRanks runs f for ranks 0..n-1, each on its own goroutine, and returns
// each rank's error: the tests' fan-out of goroutine ranks.
func OnRanks(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}
