package comm

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
)

// benchWorld builds n communicators over the in-process transport or, with
// tcp, over the real bootstrap and loopback TCP links.
func benchWorld(b *testing.B, n int, tcp bool) []*Comm {
	cfg := config.Default()
	comms := make([]*Comm, n)
	if !tcp {
		for r, m := range inproc.NewWorld(n) {
			c, err := FromMesh(m, Options{Rank: r, Size: n, Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			comms[r] = c
		}
		return comms
	}
	store := rendezvous.NewMemStore()
	errs := reftest.OnRanks(n, func(r int) error {
		var err error
		comms[r], err = New(store, Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: cfg, MasterAddr: "127.0.0.1"})
		return err
	})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return comms
}

// BenchmarkAllReduce times a float32 sum all-reduce with every rank a
// goroutine of this process; -benchmem shows the steady state allocates
// nothing. Bytes per op are the buffer size (algbw).
func BenchmarkAllReduce(b *testing.B) {
	for _, transport := range []string{"inproc", "tcp"} {
		for _, n := range []int{2, 4} {
			for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%s/ranks%d/%d", transport, n, size), func(b *testing.B) {
					comms := benchWorld(b, n, transport == "tcp")
					defer func() {
						for _, c := range comms {
							c.Close()
						}
					}()
					bufs := make([][]byte, n)
					for r := range bufs {
						bufs[r] = make([]byte, size)
					}
					allReduceLoop(b, comms, bufs, 3) // warm the stash pools
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					allReduceLoop(b, comms, bufs, b.N)
				})
			}
		}
	}
}

// BenchmarkTraceCost is a 4 KiB float32 all-reduce on 2 in-process ranks
// with the flight recorder off (GOHCCL_TRACE_BUFFER=0) and on (the
// default), interleaved: rounds of a few hundred ops alternate between the
// two groups, so load on a shared machine falls on both alike. It reports
// each side's median time per op over the rounds and their ratio; -benchmem
// shows that recording allocates nothing. A 2-rank in-process all-reduce is
// the cheapest collective there is, so the recorder's share of it bounds its
// share of any other.
func BenchmarkTraceCost(b *testing.B) {
	const size, round = 4 << 10, 200
	worlds := make([][]*Comm, 2)
	for i, entries := range []int{0, config.Default().TraceBuffer} {
		cfg := config.Default()
		cfg.TraceBuffer = entries
		worlds[i] = make([]*Comm, 2)
		for r, m := range inproc.NewWorld(2) {
			c, err := FromMesh(m, Options{Rank: r, Size: 2, Config: cfg})
			if err != nil {
				b.Fatal(err)
			}
			worlds[i][r] = c
			defer c.Close()
		}
	}
	bufs := [][]byte{make([]byte, size), make([]byte, size)}
	run := func(comms []*Comm, iters int) time.Duration {
		start := time.Now()
		allReduceLoop(b, comms, bufs, iters)
		return time.Since(start)
	}
	run(worlds[0], 3)
	run(worlds[1], 3)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	var off, on []float64
	for done := 0; done < b.N; done += 2 * round {
		off = append(off, float64(run(worlds[0], round).Nanoseconds())/round)
		on = append(on, float64(run(worlds[1], round).Nanoseconds())/round)
	}
	b.StopTimer()
	median := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(median(off), "ns/op-off")
	b.ReportMetric(median(on), "ns/op-on")
	b.ReportMetric(median(on)/median(off), "on/off")
}

// allReduceLoop runs iters float32 sum all-reduces of bufs[r] on every rank
// r of comms at once, each rank on a goroutine of its own.
func allReduceLoop(b *testing.B, comms []*Comm, bufs [][]byte, iters int) {
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < iters; i++ {
				if err := c.AllReduce(bufs[r], len(bufs[r])/4, reduce.Float32, reduce.Sum, 0); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
