package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// BenchmarkLinkFrames streams frames over one loopback link of 1, 2 or 4
// connections the way a schedule does: the receive of segment j+1 is posted before segment j is
// sent, and segment j+1 is sent without waiting for the receive of segment j
// to finish. -benchmem shows the allocations per frame in steady state.
//
//	go test ./goimpl/transport/tcp -run '^$' -bench LinkFrames -benchmem
func BenchmarkLinkFrames(b *testing.B) {
	for _, stripes := range []int{1, 2, 4} {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 20} {
			benchLink(b, stripes, size)
		}
	}
}

func benchLink(b *testing.B, stripes, size int) {
	{
		b.Run(fmt.Sprintf("%dconn/%dKiB", stripes, size>>10), func(b *testing.B) {
			l0, l1, m0, _ := stripedPair(b, stripes)
			defer l0.Close()
			defer l1.Close()
			src := make([]byte, size)
			var bufs [2][]byte
			for i := range bufs {
				bufs[i] = make([]byte, size)
			}
			var rs [2]transport.Recv
			post := func(j int) {
				r := &rs[j%2]
				r.Peer, r.Want, r.Buf = 1, collFrame(j%(1<<20), size), bufs[j%2]
				m0.Post(r)
			}
			deadline := time.Now().Add(time.Hour)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			post(0)
			b.ResetTimer()
			for j := 0; j < b.N; j++ {
				if j+1 < b.N {
					post(j + 1)
				}
				h := collFrame(j%(1<<20), size)
				if err := l1.Send(&h, src, deadline); err != nil {
					b.Fatal(err)
				}
				if err := m0.Wait(&rs[j%2], deadline); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
