package mesh

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// benchSizes are the message sizes of the benchmarks, bytes per rank.
var benchSizes = []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// benchBudget is the region's budget in the benchmarks: GOHCCL_BUFFSIZE's
// default.
const benchBudget = 8 << 20

// report sets what the benchmark line shows: MB/s is algbw (bytes per rank
// over time), and busbw is algbw*2(n-1)/n, the same for n = 2.
func report(b *testing.B, size, n int) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
}

// BenchmarkAllReduce is a float32 sum all-reduce between two local ranks:
// two processes over a shared segment (what a host runs), and two
// goroutines over a heap region.
func BenchmarkAllReduce(b *testing.B) {
	benchOp(b, serveAllReduce)
}

func BenchmarkAllGather(b *testing.B)     { benchOp(b, serveAllGather) }
func BenchmarkReduceScatter(b *testing.B) { benchOp(b, serveReduceScatter) }
func BenchmarkBroadcast(b *testing.B)     { benchOp(b, serveBroadcast) }
func BenchmarkReduce(b *testing.B)        { benchOp(b, serveReduce) }

func benchOp(b *testing.B, op int) {
	b.Run("procs=2", func(b *testing.B) {
		p := startChild(b, "serve", benchBudget)
		for _, size := range benchSizes {
			buf, out := touched(size), touched(2*size)
			b.Run(sizeName(size), func(b *testing.B) {
				report(b, size, 2)
				p.send(op, size, b.N+1)
				if err := serveOp(p.e, op, buf, out, 1, 1, 0, false, nil); err != nil {
					b.Fatal(err)
				}
				lat := make([]time.Duration, b.N)
				b.ResetTimer()
				if err := serveOp(p.e, op, buf, out, 2, b.N, 0, true, lat); err != nil {
					b.Fatal(err)
				}
				reportMedian(b, lat)
			})
		}
		p.send(serveExit, 0, 0)
		if err := p.wait(b); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("goroutines=2", func(b *testing.B) {
		es := engines(b, 2, benchBudget)
		for _, size := range benchSizes {
			bufs := [2][]byte{touched(size), touched(size)}
			outs := [2][]byte{touched(2 * size), touched(2 * size)}
			b.Run(sizeName(size), func(b *testing.B) {
				report(b, size, 2)
				done := make(chan error, 1)
				go func() { done <- serveOp(es[1], op, bufs[1], outs[1], 1, b.N+1, 1, true, nil) }()
				if err := serveOp(es[0], op, bufs[0], outs[0], 1, 1, 0, false, nil); err != nil {
					b.Fatal(err)
				}
				lat := make([]time.Duration, b.N)
				b.ResetTimer()
				if err := serveOp(es[0], op, bufs[0], outs[0], 2, b.N, 0, true, lat); err != nil {
					b.Fatal(err)
				}
				reportMedian(b, lat)
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	})
}

// reportMedian adds the median time of one op to the line: on a machine
// shared with other work, a rank that loses its core for a time slice makes
// its peer wait that long, and a few such ops move the mean (ns/op) far
// more than the median.
func reportMedian(b *testing.B, lat []time.Duration) {
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/op")
}

// BenchmarkMemcpy is the context: one copy of the same size on one core.
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range benchSizes {
		src, dst := touched(size), touched(size)
		b.Run(sizeName(size), func(b *testing.B) {
			report(b, size, 1)
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

var _ = reduce.Float32
var _ = transport.KindAllReduce
