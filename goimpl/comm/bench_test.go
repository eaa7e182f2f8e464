package comm

import (
	"fmt"
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
					run := func(iters int) {
						var wg sync.WaitGroup
						for r, c := range comms {
							wg.Add(1)
							go func() {
								defer wg.Done()
								for i := 0; i < iters; i++ {
									if err := c.AllReduce(bufs[r], size/4, reduce.Float32, reduce.Sum, 0); err != nil {
										b.Error(err)
										return
									}
								}
							}()
						}
						wg.Wait()
					}
					run(3) // warm the stash pools
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					run(b.N)
				})
			}
		}
	}
}
