package pattern

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// sink keeps the compiler from discarding benchmarked results.
var sink int

// TestAccessorsDoNotAllocate checks the hot-path promise of the package
// doc: accessors return values or fill the caller's slice.
func TestAccessorsDoNotAllocate(t *testing.T) {
	buf := make([]int, 0, 64)
	cases := map[string]func(){
		"Ring":            func() { r := Ring{Rank: 5, Size: 12}; sink = r.Next() + r.RSSendChunk(3) + r.AGRecvChunk(7) },
		"Chain":           func() { c := Chain{Rank: 5, Size: 12, Root: 9}; sink = c.Next() + c.Prev() + c.Position() },
		"Blocks":          func() { o, l := Blocks(1000003, 12, 7); sink = o + l },
		"Binomial":        func() { b := Binomial{Rank: 3, Size: 1000, Root: 7}; sink = len(b.Children(buf[:0])) + b.Parent() },
		"BinomialReduce":  func() { sink = len(Binomial{Rank: 7, Size: 1000, Root: 7}.ReduceChildren(buf[:0])) },
		"DoubleTree":      func() { d := DoubleTree{Rank: 9, Size: 13}; sink = d.Parent(1) + d.Children(0)[1] + d.Root(1) },
		"HalvingDoubling": func() { h := HalvingDoubling{Rank: 9, Size: 13}; lo, hi := h.Keep(1); sink = lo + hi + h.Partner(2) },
		"Dissemination":   func() { d := Dissemination{Rank: 9, Size: 13}; sink = d.SendPeer(3) + d.RecvPeer(2) },
		"Pairwise":        func() { p := Pairwise{Rank: 9, Size: 13}; sink = p.SendPeer(5) + p.RecvPeer(5) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			require.Zero(t, testing.AllocsPerRun(100, f), "allocations per call")
		})
	}
}

func BenchmarkBinomialChildren(b *testing.B) {
	buf := make([]int, 0, 64)
	for i := 0; b.Loop(); i++ {
		buf = Binomial{Rank: i % 1000, Size: 1000, Root: 3}.Children(buf[:0])
	}
	sink = len(buf)
}

func BenchmarkDoubleTree(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		d := DoubleTree{Rank: i & 511, Size: 999}
		sink += d.Parent(i&1) + d.Children(i & 1)[0]
	}
}

func BenchmarkRingChunks(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		r := Ring{Rank: i & 511, Size: 1000}
		sink += r.RSSendChunk(i&511) + r.RSRecvChunk(i&511)
	}
}

func BenchmarkHalvingDoubling(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		h := HalvingDoubling{Rank: i & 511, Size: 1000}
		lo, hi := h.Keep(i % 9)
		sink += lo + hi + h.Partner(i%9)
	}
}
