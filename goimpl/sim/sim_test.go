package sim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/tune"
)

// named is coll's choice called form at the net's segment.
func named(t testing.TB, coll tune.Coll, form string, net Net) tune.Choice {
	t.Helper()
	c, err := tune.Named(coll, form, net.Segment)
	require.NoError(t, err)
	return c
}

// TestClosedForms checks the simulator against the alpha-beta formulas for
// schedules without contention: ring and halving-doubling all-reduce take
// 2(n-1) and 2 log2 n steps and send 2(n-1)/n of the buffer per rank.
func TestClosedForms(t *testing.T) {
	l := tune.Link{Latency: 10e-6, Bandwidth: 10e9}
	for _, n := range []int{4, 8, 16, 12} {
		net := Net{Ranks: n, Intra: l, Inter: l, Segment: 256 << 10}
		S := float64(16 << 20)
		nf := float64(n)
		seg := float64(net.Segment)
		frames := func(b float64) float64 { return math.Max(1, math.Ceil(b/seg)) }
		ring, err := Run(net, tune.AllReduce, named(t, tune.AllReduce, "ring", net), int(S))
		require.NoError(t, err)
		// 2(n-1) steps of one chunk each, one latency per segment.
		want := 2*(nf-1)*frames(S/nf)*l.Latency + 2*(nf-1)/nf*S/l.Bandwidth
		assert.InEpsilon(t, want, ring, 0.03, "ring n=%d: sim %g, formula %g", n, ring, want)

		rhd, err := Run(net, tune.AllReduce, named(t, tune.AllReduce, "rhd", net), int(S))
		require.NoError(t, err)
		p := float64(int(1) << (63 - leadingZeros(n)))
		want = 0
		for d := p / 2; d >= 1; d /= 2 { // halving and doubling step of distance d
			want += 2 * (frames(S*d/p)*l.Latency + S*d/p/l.Bandwidth)
		}
		if p != nf { // fold and unfold: the whole buffer each way
			want += 2 * (l.Latency + S/l.Bandwidth) // one-way: the segments stream
		}
		assert.InEpsilon(t, want, rhd, 0.03, "rhd n=%d: sim %g, formula %g", n, rhd, want)

		m := tune.Model{Intra: l, Inter: l, ReduceBW: math.Inf(1), Segment: net.Segment}
		s := tune.Shape{N: n, Nodes: 1, PerNode: n, Consecutive: true, Bytes: S}
		assert.InEpsilon(t, m.Cost(named(t, tune.AllReduce, "rhd", net), s), rhd, 0.03)
		assert.InEpsilon(t, m.Cost(named(t, tune.AllReduce, "ring", net), s), ring, 0.03)
	}
}

func leadingZeros(n int) int {
	z := 0
	for x := uint64(n); x&(1<<63) == 0; x <<= 1 {
		z++
	}
	return z
}

// TestSeedCase runs the seed's 4 nodes x 8 ranks all-reduce (scaled to
// 64 MiB to stay fast) and checks the order the model predicts.
func TestSeedCase(t *testing.T) {
	net := Seed(4)
	times := map[string]float64{}
	for _, form := range []string{"ring", "tree", "level0:ring;level1:tree", "level0:ring;level1:ring"} {
		s, err := Run(net, tune.AllReduce, named(t, tune.AllReduce, form, net), 64<<20)
		require.NoError(t, err, form)
		times[form] = s
	}
	assert.Less(t, times["level0:ring;level1:tree"], times["ring"])
	assert.Less(t, times["level0:ring;level1:ring"], times["level0:ring;level1:tree"])
	assert.Less(t, times["ring"], times["tree"])
}

func TestMismatchDetected(t *testing.T) {
	// Every schedule runs to completion on every rank count it is given;
	// a broken schedule would surface as an error, not a hang.
	for _, n := range []int{1, 2, 3, 5} {
		for _, a := range []string{"ring", "tree", "dtree", "rhd"} {
			net := Net{Ranks: n, Intra: tune.Link{Latency: 1e-6, Bandwidth: 1e9}, Inter: tune.Link{Latency: 1e-6, Bandwidth: 1e9}, Segment: 1 << 20}
			_, err := Run(net, tune.AllReduce, named(t, tune.AllReduce, a, net), 4<<20)
			require.NoError(t, err)
		}
	}
}

// TestDoubleTreePipelines checks that the double binary tree streams both
// trees at once: a rank waiting on the tree it forwards in must not hold back
// the tree it is a leaf in. When it did (one loop over both trees), 1 GiB
// on 8 ranks took 4.2x its alpha-beta price; now it is within the price.
func TestDoubleTreePipelines(t *testing.T) {
	for _, shape := range []struct{ nodes, perNode int }{{1, 8}, {1, 7}, {4, 8}} {
		net := Seed(shape.nodes)
		net.PerNode, net.Ranks = shape.perNode, shape.nodes*shape.perNode
		net.Segment = 4 << 20
		const bytes = 256 << 20
		c := named(t, tune.AllReduce, "dtree", net)
		got, err := Run(net, tune.AllReduce, c, bytes)
		require.NoError(t, err)
		m := tune.Model{Intra: net.Intra, Inter: net.Inter, ReduceBW: net.ReduceBW, Segment: net.Segment}
		s := tune.Shape{N: net.Ranks, Nodes: shape.nodes, PerNode: shape.perNode, Consecutive: true, Bytes: bytes}
		price := m.Cost(c, s)
		assert.Less(t, got, 1.15*price, "%d x %d ranks: simulated %g s, priced %g s", shape.nodes, shape.perNode, got, price)
	}
}

// BenchmarkSimAllReduce reports the simulated time (sim-ms) of a 256 MiB
// all-reduce on one node of 8 ranks of the seed's cluster, per algorithm.
func BenchmarkSimAllReduce(b *testing.B) {
	net := Seed(1)
	net.Segment = 4 << 20
	for _, a := range []string{"ring", "tree", "dtree", "rhd"} {
		b.Run(a, func(b *testing.B) {
			c := named(b, tune.AllReduce, a, net)
			var got float64
			for i := 0; i < b.N; i++ {
				var err error
				if got, err = Run(net, tune.AllReduce, c, 256<<20); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(got*1e3, "sim-ms")
		})
	}
}

// TestVectorSchedules runs every allgather and reduce-scatter candidate
// that can run, on one node and across nodes, and checks the contention-free
// ones against their prices: the simulator runs the real schedules, so a
// schedule that deadlocked or sent a frame its peer does not expect would
// fail here, and one that serialized what should overlap would miss its
// price.
func TestVectorSchedules(t *testing.T) {
	for _, shape := range []struct{ nodes, perNode int }{{1, 1}, {1, 3}, {1, 5}, {1, 8}, {2, 4}, {3, 2}, {4, 8}} {
		net := Seed(shape.nodes)
		net.PerNode, net.Ranks = shape.perNode, shape.nodes*shape.perNode
		net.Segment = 1 << 20
		m := tune.Model{Intra: net.Intra, Inter: net.Inter, ReduceBW: net.ReduceBW, Segment: net.Segment}
		s := tune.Shape{N: net.Ranks, Nodes: shape.nodes, PerNode: shape.perNode, Consecutive: true}
		for _, coll := range []tune.Coll{tune.AllGather, tune.ReduceScatter} {
			const bytes = 96 << 20
			for _, r := range m.Price(coll, s, bytes, tune.Restriction{}) {
				if r.Err != nil || r.Choice.Row.Place == tune.Node || r.Choice.Level0 != nil && r.Choice.Level0.Name == "mesh" {
					continue
				}
				got, err := Run(net, coll, r.Choice, bytes)
				require.NoError(t, err, "%s %s on %d x %d", coll, r.Choice, shape.nodes, shape.perNode)
				if net.Ranks > 1 {
					// The folded halving's uneven halves overlap more than
					// its price says: once the smaller half is sent, the
					// larger streams without waiting (13% on 3 ranks). The
					// Bruck allgather's last round packs the segment that
					// spans the wrap through a slot, which its price leaves
					// out. Across nodes of several ranks its flows also
					// contend for the node's uplink in the order the
					// goroutines reach it (the package doc): on 4 x 8, 100
					// runs simulated 1.04-1.16x the price, and one in about
					// 50 passed 1.15 (1.17, 1.18).
					tol := 0.05
					switch name := r.Choice.Name(); {
					case coll == tune.ReduceScatter && name == "rhd" && net.Ranks&(net.Ranks-1) != 0:
						tol = 0.15
					case name == "bruck" && shape.nodes > 1 && shape.perNode > 2:
						tol = 0.25
					case name == "bruck":
						tol = 0.15
					}
					if r.Choice.Segment == net.Segment {
						assert.InEpsilon(t, r.Seconds, got, tol, "%s %s on %d x %d: simulated %g s, priced %g s",
							coll, r.Choice, shape.nodes, shape.perNode, got, r.Seconds)
						continue
					}
					// Smaller segments: the model charges each frame its
					// latency in full, where the simulator overlaps some
					// of them, so it may overprice (the tuner then picks
					// them less), but must not underprice.
					assert.LessOrEqual(t, got, r.Seconds*(1+tol), "%s %s on %d x %d: simulated %g s, priced %g s",
						coll, r.Choice, shape.nodes, shape.perNode, got, r.Seconds)
					assert.GreaterOrEqual(t, got, r.Seconds*0.6, "%s %s on %d x %d: simulated %g s, priced %g s",
						coll, r.Choice, shape.nodes, shape.perNode, got, r.Seconds)
				}
			}
		}
	}
}

// TestFlatRingAcrossNodes checks the ring's price across nodes, where only
// the edges between nodes are slow: the segments' chain of hops goes round
// the ring and pays the average edge, unless the slowest edge's
// serialization sets the pace. The model once charged every hop the
// inter-node link: 3.3x the simulated time at 64 KiB on 4 x 8.
func TestFlatRingAcrossNodes(t *testing.T) {
	for _, c := range []struct {
		nodes, bytes int
		coll         tune.Coll
	}{{4, 64 << 10, tune.AllReduce}, {4, 64 << 20, tune.AllReduce}, {16, 1 << 20, tune.AllReduce},
		{4, 64 << 10, tune.AllGather}, {4, 64 << 10, tune.ReduceScatter}, {4, 64 << 10, tune.Broadcast}, {4, 64 << 20, tune.Broadcast}} {
		net := Seed(c.nodes)
		net.Segment = 1 << 20
		m := tune.Model{Intra: net.Intra, Inter: net.Inter, ReduceBW: net.ReduceBW, Segment: net.Segment}
		s := tune.Shape{N: net.Ranks, Nodes: c.nodes, PerNode: 8, Consecutive: true, Bytes: float64(c.bytes)}
		ring := named(t, c.coll, "ring", net)
		got, err := Run(net, c.coll, ring, c.bytes)
		require.NoError(t, err)
		price := m.Cost(ring, s)
		assert.InEpsilon(t, price, got, 0.1, "%s ring of %d bytes on %d x 8: simulated %g s, priced %g s", c.coll, c.bytes, c.nodes, got, price)
	}
}

// TestSharedNodeLink checks the model's shared node link (tune.Model.NodeBW:
// one NIC per host) against the simulator's node uplinks: the hierarchical
// forms' level1 slices and halving-doubling's steps across nodes cross from
// every rank of a node at once, so each sees the node's link split among
// them; a flat ring across consecutive nodes crosses from one rank per node
// and does not. Emulated hosts of 2 ranks on 1 Gb/s links (issue 17).
func TestSharedNodeLink(t *testing.T) {
	intra := tune.Link{Latency: 5e-6, Bandwidth: 3e9}
	inter := tune.Link{Latency: 100e-6, Bandwidth: 125e6}
	net := Net{Ranks: 8, PerNode: 2, Intra: intra, Inter: inter, NodeBW: inter.Bandwidth, ReduceBW: 20e9, Segment: 1 << 20}
	m := tune.Model{Intra: intra, Inter: inter, NodeBW: net.NodeBW, ReduceBW: net.ReduceBW, Segment: net.Segment}
	alone := m
	alone.NodeBW = 0
	s := tune.Shape{N: 8, Nodes: 4, PerNode: 2, Consecutive: true}
	const bytes = 16 << 20
	s.Bytes = bytes
	for _, form := range []string{"level0:ring;level1:ring", "level0:ring;level1:rhd", "rhd", "ring"} {
		c := named(t, tune.AllReduce, form, net)
		sim, err := Run(net, tune.AllReduce, c, bytes)
		require.NoError(t, err, form)
		priced := m.Cost(c, s)
		// Halving-doubling's two flows of a node contend for its uplink in
		// the order the goroutines reach it, which moves the simulated time
		// by up to 20% between runs (see the package doc); the rings do not.
		tol := 0.10
		if form != "ring" && form != "level0:ring;level1:ring" {
			tol = 0.25
		}
		assert.InEpsilon(t, sim, priced, tol, "%s: simulated %g, priced %g", form, sim, priced)
		if form == "ring" {
			assert.InEpsilon(t, alone.Cost(c, s), priced, 1e-9, "a flat ring crosses from one rank per node")
		} else {
			assert.Greater(t, priced, 1.5*alone.Cost(c, s), "%s: two ranks share each node's link", form)
		}
	}
}
