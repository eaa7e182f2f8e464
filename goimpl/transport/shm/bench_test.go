package shm

import (
	"flag"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// benchRing is the ring of the benchmarks; -ring=N tries another.
var benchRing = flag.Int("ring", 1<<20, "ring bytes per directed pair in the benchmarks")

var benchSizes = []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkPingPong bounces one frame between two ranks: an op is one
// round trip, so ns/op is the round-trip latency and MB/s (bytes moved
// both ways per op) is the ping-pong bandwidth, size / half a round trip.
// The receiving rank waits in Matcher.Wait as the algorithms do.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("goroutines/"+sizeName(size), func(b *testing.B) {
			p := newPingPong(b, size, *benchRing)
			defer p.stop()
			b.SetBytes(2 * int64(size))
			b.ReportAllocs()
			for b.Loop() {
				p.roundTrip()
			}
		})
	}
	for _, size := range benchSizes {
		b.Run("processes/"+sizeName(size), func(b *testing.B) {
			_, l, m := startPair(b, "echo", *benchRing, envSize+"="+strconv.Itoa(size))
			hd := p2pHeader(1, size)
			payload := make([]byte, size)
			r := transport.Recv{Peer: 1, Want: hd, Buf: make([]byte, size)}
			b.SetBytes(2 * int64(size))
			b.ReportAllocs()
			for b.Loop() {
				m.Post(&r)
				if err := l.Send(&hd, payload, time.Now().Add(time.Minute)); err != nil {
					b.Fatal(err)
				}
				if err := m.Wait(&r, time.Now().Add(time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// streamWindow is how many receives BenchmarkStream keeps posted, so that
// frames land in posted buffers rather than in stash buffers.
const streamWindow = 4

// BenchmarkStream sends frames one way back to back, as a pipelined
// schedule does; MB/s is the link's one-way bandwidth.
func BenchmarkStream(b *testing.B) {
	for _, size := range benchSizes[2:] {
		b.Run(sizeName(size), func(b *testing.B) {
			h := newHost(b, []int{0, 1}, 2, *benchRing)
			hd := p2pHeader(1, size)
			payload := make([]byte, size)
			recvd := make(chan error, 1)
			n := b.N
			var window [streamWindow]transport.Recv
			for i := range window {
				window[i] = transport.Recv{Peer: 0, Want: hd, Buf: make([]byte, size)}
				if i < n {
					h.matchers[1].Post(&window[i])
				}
			}
			go func() {
				for i := range n {
					r := &window[i%streamWindow]
					if err := h.matchers[1].Wait(r, time.Now().Add(time.Minute)); err != nil {
						recvd <- err
						return
					}
					if i+streamWindow < n {
						h.matchers[1].Post(r)
					}
				}
				recvd <- nil
			}()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range n {
				if err := h.links[0][1].Send(&hd, payload, time.Now().Add(time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-recvd; err != nil {
				b.Fatal(err)
			}
		})
	}
}
