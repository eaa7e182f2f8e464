// Command gohccl-sim runs a collective's real schedules on a simulated
// cluster and prints, per algorithm, the alpha-beta prediction, the
// simulated time, algbw and busbw, and the tuner's choice. The command line
// is goimpl/sim/cli's, which `python -m gohccl.sim` runs too.
//
//	gohccl-sim -nodes 4 -per-node 8 -bytes 1G     # the seed's case
//	gohccl-sim -nodes 128 -per-node 8 -bytes 64M -algos ring,level0:ring;level1:tree
//	gohccl-sim -nodes 1 -per-node 4 -intra-bw 1.2 -intra-lat 30 -bytes 1M -json   # one JSON object per line
package main

import (
	"os"

	"github.com/gohccl/gohccl/goimpl/sim/cli"
)

func main() {
	os.Exit(cli.Main("gohccl-sim", os.Args[1:], os.Stdout, os.Stderr))
}
