package comm

import (
	"github.com/gohccl/gohccl/goimpl/tune"
)

// Info is what a communicator knows of its group, for a bug report
// (`python -m gohccl.info` under torchrun): the nodes, the transport to each
// peer, the reduce path and the tuner's table at a few sizes.
type Info struct {
	Rank, Size int
	// Host is this rank's host identity; Topology groups the ranks into
	// nodes ("2 nodes x 4 ranks"), Nodes lists each node's ranks.
	Host     string
	Topology string
	Nodes    [][]int
	// Links is the transport class to each rank ("self" for this one).
	Links []string
	// ReducePath is the kernels' instruction set; BufferBytes the scratch
	// size and SegmentBytes the streaming segment.
	ReducePath                string
	BufferBytes, SegmentBytes int
	// Algo is GOHCCL_ALGO as parsed; Table is the tuner's priced line for
	// each tuned collective at each of InfoSizes, as GOHCCL_DEBUG=INFO
	// prints it.
	Algo  string
	Table []string
	// Trials are the (collective, size class) the tuner is measuring now
	// (GOHCCL_TUNE): their next ops run the candidates in turn, so a
	// benchmark warms up until its size is not among them.
	Trials []Trial
}

// Trial is one size class being measured: Coll's ops of Low up to High
// bytes, of which the next Left are the trial's.
type Trial struct {
	Coll            string
	Low, High, Left int
}

// InfoSizes are the message sizes Info prices the table at.
var InfoSizes = []int{4 << 10, 256 << 10, 16 << 20, 256 << 20}

// Info describes the communicator. It runs no collective and may be called
// at any time on an open communicator.
func (c *Comm) Info() Info {
	c.mu.Lock() // the tuner's choices are cached by the collectives too
	defer c.mu.Unlock()
	in := Info{Rank: c.rank, Size: c.size, Topology: c.topo.String(), Nodes: c.topo.Nodes,
		ReducePath: c.path.Name(), BufferBytes: len(c.scratch), SegmentBytes: c.op.Segment, Algo: c.cfg.Algo}
	if c.rank < len(c.hosts) {
		in.Host = c.hosts[c.rank]
	}
	for p := range c.size {
		if p == c.rank {
			in.Links = append(in.Links, "self")
		} else {
			in.Links = append(in.Links, c.mesh.LinkTo(p).Class())
		}
	}
	for _, coll := range []tune.Coll{tune.AllReduce, tune.Broadcast, tune.Reduce, tune.AllGather, tune.ReduceScatter} {
		for _, n := range InfoSizes {
			in.Table = append(in.Table, c.tuner.Table(coll, n))
		}
		for class := 1; class < 63; class++ {
			low := 1 << (class - 1)
			if left := c.tuner.TrialLeft(coll, low); left > 0 {
				in.Trials = append(in.Trials, Trial{Coll: coll.String(), Low: low, High: 2 * low, Left: left})
			}
		}
	}
	return in
}
