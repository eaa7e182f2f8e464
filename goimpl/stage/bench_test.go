package stage

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/reduce"
)

// BenchmarkStagedAllReduce shows what the pipeline buys: a 16 MiB float32
// all-reduce of 2 goroutine ranks on the fake CUDA runtime, whose every copy
// takes an injected delay on top of the copying (a slow link), timed four
// ways over the same chunks:
//
//	host    the host collectives of the chunks alone, on pinned memory
//	copies  the chunks' copies alone (down and up, one synchronize at the end)
//	serial  each chunk copied down, reduced, copied up, one after another
//	staged  the pipeline
//
// staged should take about the larger of host and copies, serial about
// their sum. Run: go test ./goimpl/stage -run - -bench StagedAllReduce
func BenchmarkStagedAllReduce(b *testing.B) {
	const n, count = 2, 4 << 20
	dt := reduce.Float32
	for _, delay := range []time.Duration{200 * time.Microsecond, time.Millisecond} {
		g := newGroup(b, device.CUDA, n, config.Default().BuffSize)
		bufs := make([]device.Ptr, n)
		for r := range bufs {
			bufs[r] = g.alloc(r, nil, count*dt.Size())
		}
		staged := func(r int, s *Stager, at Place) error {
			return s.AllReduce(at, bufs[r], count, dt, reduce.Sum, 0)
		}
		noErrors(b, g.run(staged)) // allocates the slots, and cuts the call
		g.fake.SetDelay(delay)
		per, chunks := g.stagers[0].call.per, g.stagers[0].call.chunks
		// each runs f on every chunk of rank r's buffer, in slot k%3.
		each := func(s *Stager, f func(k int, slot []byte, buf device.Ptr) error) error {
			for k := 0; k < chunks; k++ {
				nb := min(per, count-k*per) * dt.Size()
				if err := f(k, s.slot[k%slots][:nb], bufs[s.c.Rank()].Add(k*per*dt.Size())); err != nil {
					return err
				}
			}
			return nil
		}
		ways := []struct {
			name string
			f    func(r int, s *Stager, at Place) error
		}{
			{"host", func(r int, s *Stager, at Place) error {
				return each(s, func(k int, slot []byte, _ device.Ptr) error {
					return s.c.AllReduce(slot, len(slot)/dt.Size(), dt, reduce.Sum, 0)
				})
			}},
			{"copies", func(r int, s *Stager, at Place) error {
				runtime.LockOSThread() // the fake's current device is per thread
				defer runtime.UnlockOSThread()
				if _, err := s.rt.SetDevice(at.Device); err != nil {
					return err
				}
				err := each(s, func(k int, slot []byte, buf device.Ptr) error {
					if err := s.rt.CopyToHost(slot, buf, at.Stream); err != nil {
						return err
					}
					return s.rt.CopyToDevice(buf, slot, at.Stream)
				})
				if err != nil {
					return err
				}
				return s.rt.Synchronize(at.Stream)
			}},
			{"serial", func(r int, s *Stager, at Place) error {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				if _, err := s.rt.SetDevice(at.Device); err != nil {
					return err
				}
				return each(s, func(k int, slot []byte, buf device.Ptr) error {
					if err := s.rt.CopyToHost(slot, buf, at.Stream); err != nil {
						return err
					}
					if err := s.rt.Synchronize(at.Stream); err != nil {
						return err
					}
					if err := s.c.AllReduce(slot, len(slot)/dt.Size(), dt, reduce.Sum, 0); err != nil {
						return err
					}
					if err := s.rt.CopyToDevice(buf, slot, at.Stream); err != nil {
						return err
					}
					return s.rt.Synchronize(at.Stream)
				})
			}},
			{"staged", staged},
		}
		for _, w := range ways {
			b.Run(fmt.Sprintf("delay=%s/chunks=%d/%s", delay, chunks, w.name), func(b *testing.B) {
				b.SetBytes(int64(count * dt.Size()))
				for b.Loop() {
					noErrors(b, g.run(func(r int, s *Stager, at Place) error {
						return w.f(r, s, at)
					}))
				}
			})
		}
	}
}

// BenchmarkStagedAllReduceAllocs measures what one staged all-reduce
// allocates in steady state (one rank, no delay, several chunks): the
// pipeline itself should allocate nothing; what shows is the fake's and
// comm's. Run with -benchmem.
func BenchmarkStagedAllReduceAllocs(b *testing.B) {
	g := newGroup(b, device.ACL, 1, config.MinBuffSize)
	const count = 20011
	buf := g.alloc(0, nil, count*4)
	s, at := g.stagers[0], g.places[0]
	b.ReportAllocs()
	for b.Loop() {
		if err := s.AllReduce(at, buf, count, reduce.Float32, reduce.Sum, 0); err != nil {
			b.Fatal(err)
		}
	}
}
