package sim

import "github.com/gohccl/gohccl/goimpl/tune"

// Seed returns the seed write-up's cluster with the given number of nodes
// of 8 ranks: HCCS inside a node (392 GB/s per rank, 2 us per step) and
// 100 Gb/s RoCE between nodes (12.5 GB/s per rank, one NIC per rank, 10 us
// per step), reduce at 200 GB/s (an accelerator's vector units).
func Seed(nodes int) Net {
	return Net{
		Ranks: 8 * nodes, PerNode: 8,
		Intra:    tune.Link{Latency: 2e-6, Bandwidth: 392e9},
		Inter:    tune.Link{Latency: 10e-6, Bandwidth: 12.5e9},
		ReduceBW: 200e9,
		Segment:  4 << 20,
	}
}
