package tune

import (
	"fmt"
	"math"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/mesh"
)

// The table. Each collective's rows are listed in preference order: on a
// tie of price (within Tie) the earlier row wins. A new algorithm is one
// file in goimpl/algo and one row here (docs/extending.md); the tests that
// sweep the table run it on every transport and world size.

func init() {
	register(
		&Row{Coll: AllReduce, Name: "ring", Desc: "reduce-scatter then allgather around the ring: 2(n-1) steps, 2(n-1)/n S sent",
			CanRun: always, AllReduce: algo.AllReduceRing,
			Cost: func(m Model, s Shape, _ Choice) float64 {
				nf := float64(s.N)
				return m.ring(s, s.N-1, s.Bytes/nf, true) + m.ring(s, s.N-1, s.Bytes/nf, false)
			},
			Run: func(x *Exec, _ Choice, a *Args) error { return algo.AllReduceRing(x.Op, a.Buf, a.Count) }},
		&Row{Coll: AllReduce, Name: "tree", Desc: "pipelined binary tree: reduce up, broadcast down, 2 log2 n steps",
			CanRun: always, AllReduce: algo.AllReduceTree,
			Cost: func(m Model, s Shape, _ Choice) float64 {
				return 2*m.pipelined(m.flat(s), log2floor(s.N), s.Bytes, 2) + 2*s.Bytes/m.ReduceBW
			},
			Run: func(x *Exec, _ Choice, a *Args) error { return algo.AllReduceTree(x.Op, a.Buf, a.Count) }},
		&Row{Coll: AllReduce, Name: "dtree", Desc: "double binary tree: each half of the data down its own tree, every rank interior in at most one",
			CanRun: always, AllReduce: algo.AllReduceDoubleTree,
			Cost: func(m Model, s Shape, _ Choice) float64 {
				return 2*m.pipelined(m.flat(s), log2floor(s.N), s.Bytes/2, 2) + s.Bytes/m.ReduceBW
			},
			Run: func(x *Exec, _ Choice, a *Args) error { return algo.AllReduceDoubleTree(x.Op, a.Buf, a.Count) }},
		&Row{Coll: AllReduce, Name: "rhd", Desc: "recursive halving-doubling, extra ranks folded: 2 log2 n steps, 2(n-1)/n S sent",
			CanRun: always, AllReduce: algo.AllReduceRHD,
			Cost: func(m Model, s Shape, _ Choice) float64 { return m.rhd(s, s.Bytes, true) },
			Run:  func(x *Exec, _ Choice, a *Args) error { return algo.AllReduceRHD(x.Op, a.Buf, a.Count) }},
		meshRow(AllReduce, mesh.OneShot, "every rank posts its input and reduces all of them itself: one wait per chunk, (n-1)S read across cores",
			meshAllReduce, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.AllReduce(c, a.Buf) }),
		meshRow(AllReduce, mesh.TwoPhase, "reduce-scatter and allgather fused chunk by chunk: two waits per chunk, 2(n-1)/n S read across cores",
			meshAllReduce, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.AllReduce(c, a.Buf) }),
		meshRow(AllReduce, mesh.SingleCopy, "two ranks read each other's halves straight out of the peer's process (process_vm_readv): three waits, 2S read",
			meshAllReduce, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.AllReduce(c, a.Buf) }),
		levelsRow(AllReduce, func(x *Exec, c Choice, a *Args) error {
			return algo.AllReduceHier(x.Op, a.Buf, a.Count, x.Hier, c.Level0.Leg, c.Level1.AllReduce)
		}),

		&Row{Coll: Broadcast, Name: "ring", Desc: "pipelined chain from the root: n-1+S/segment segment times, every rank sends S once",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 { return m.chain(s, s.N-1, s.Bytes) },
			Run: rooted(algo.BroadcastChain)},
		&Row{Coll: Broadcast, Name: "binomial", Desc: "binomial tree: ceil(log2 n) steps, the root sends S once per child",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 {
				l := m.flat(s)
				return float64(log2ceil(s.N)) * (l.Latency + s.Bytes/l.Bandwidth)
			},
			Run: rooted(algo.BroadcastTree)},
		&Row{Coll: Broadcast, Name: "tree", Desc: "pipelined binary tree: log2 n deep, each interior rank sends 2S",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 { return m.pipelined(m.flat(s), log2floor(s.N), s.Bytes, 2) },
			Run: rooted(algo.BroadcastBinaryTree)},
		&Row{Coll: Broadcast, Name: "dtree", Desc: "double binary tree: each half down its own tree",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 {
				l := m.flat(s)
				return m.pipelined(l, log2floor(s.N)+1, s.Bytes/2, 2) + s.Bytes/2/l.Bandwidth
			},
			Run: rooted(algo.BroadcastDoubleTree)},
		meshRow(Broadcast, mesh.OneShot, "the root copies each chunk into every rank's buffer, the others copy it out",
			meshBroadcast, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.Broadcast(c, a.Buf, a.Root) }),
		meshRow(Broadcast, mesh.SingleCopy, "the other rank reads the root's buffer straight out of its process (two ranks)",
			meshBroadcast, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.Broadcast(c, a.Buf, a.Root) }),
		eagerRow(meshRow(Broadcast, mesh.Eager, "the root copies the message into its own slots and returns, the others copy it out; the root checks their stamps later",
			meshBroadcast, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.Broadcast(c, a.Buf, a.Root) })),

		&Row{Coll: Reduce, Name: "ring", Desc: "pipelined chain ending at the root, each rank adding its part",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 { return m.chain(s, s.N-1, s.Bytes) + s.Bytes/m.ReduceBW },
			Run: rooted(algo.ReduceChain)},
		&Row{Coll: Reduce, Name: "binomial", Desc: "binomial tree up to the root: ceil(log2 n) steps",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 {
				l := m.flat(s)
				return float64(log2ceil(s.N))*(l.Latency+s.Bytes/l.Bandwidth) + s.Bytes/m.ReduceBW
			},
			Run: rooted(algo.ReduceTree)},
		&Row{Coll: Reduce, Name: "tree", Desc: "pipelined binary tree up to the root",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 {
				return m.pipelined(m.flat(s), log2floor(s.N), s.Bytes, 2) + s.Bytes/m.ReduceBW
			},
			Run: rooted(algo.ReduceBinaryTree)},
		&Row{Coll: Reduce, Name: "dtree", Desc: "double binary tree: each half up its own tree",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 {
				l := m.flat(s)
				return m.pipelined(l, log2floor(s.N)+1, s.Bytes/2, 2) + s.Bytes/2/l.Bandwidth + s.Bytes/m.ReduceBW
			},
			Run: rooted(algo.ReduceDoubleTree)},
		meshRow(Reduce, mesh.OneShot, "every rank posts its input, the root reduces all of them",
			meshReduce, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.Reduce(c, a.Buf, a.Root) }),
		meshRow(Reduce, mesh.TwoPhase, "each rank reduces its block of every chunk, the root copies the blocks out",
			meshReduce, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.Reduce(c, a.Buf, a.Root) }),

		&Row{Coll: AllGather, Name: "ring", Desc: "n-1 steps around the ring, (n-1)/n S sent",
			CanRun: always, Vector: &level1Ring,
			Cost: func(m Model, s Shape, _ Choice) float64 { return m.ring(s, s.N-1, s.Bytes/float64(s.N), false) },
			Run:  func(x *Exec, _ Choice, a *Args) error { return algo.AllGatherRing(x.Op, a.In, a.Out, a.Count) }},
		&Row{Coll: AllGather, Name: "rhd", Desc: "recursive doubling: log2 n steps, power-of-two groups",
			CanRun: powerOfTwo("recursive doubling"), Vector: &level1RHD,
			Cost: func(m Model, s Shape, _ Choice) float64 { return m.rhd(s, s.Bytes, false) },
			Run:  func(x *Exec, _ Choice, a *Args) error { return algo.AllGatherRD(x.Op, a.In, a.Out, a.Count) }},
		&Row{Coll: AllGather, Name: "bruck", Desc: "Bruck: ceil(log2 n) rounds over the dissemination peers, any n",
			CanRun: always,
			Cost:   func(m Model, s Shape, _ Choice) float64 { return m.bruck(s) },
			Run:    func(x *Exec, _ Choice, a *Args) error { return algo.AllGatherBruck(x.Op, a.In, a.Out, a.Count) }},
		meshRow(AllGather, mesh.OneShot, "every rank posts its block, each copies every block out",
			meshAllGather, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.AllGather(c, a.In, a.Out) }),
		meshRow(AllGather, mesh.SingleCopy, "each rank reads the peer's block straight out of its process (two ranks)",
			meshAllGather, func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.AllGather(c, a.In, a.Out) }),
		levelsRow(AllGather, func(x *Exec, c Choice, a *Args) error {
			return algo.AllGatherHier(x.Op, a.In, a.Out, a.Count, x.Hier, c.Level0.Leg, *c.Level1.Vector)
		}),

		&Row{Coll: ReduceScatter, Name: "ring", Desc: "n-1 steps around the ring, reducing as it goes",
			CanRun: always, Vector: &level1Ring,
			Cost: func(m Model, s Shape, _ Choice) float64 { return m.ring(s, s.N-1, s.Bytes/float64(s.N), true) },
			Run:  func(x *Exec, _ Choice, a *Args) error { return algo.ReduceScatterRing(x.Op, a.In, a.Out, a.Count) }},
		&Row{Coll: ReduceScatter, Name: "rhd", Desc: "recursive halving, extra ranks folded: about log2 n steps",
			CanRun: always, Vector: &level1RHD,
			Cost: func(m Model, s Shape, _ Choice) float64 { return m.halving(s, s.Bytes) },
			Run:  func(x *Exec, _ Choice, a *Args) error { return algo.ReduceScatterRH(x.Op, a.In, a.Out, a.Count) }},
		meshRow(ReduceScatter, mesh.OneShot, "every rank posts its pieces of the other blocks and reduces its own block's",
			func(m Model, s Shape, _ mesh.Variant) float64 { return meshReduceScatter(m, s) },
			func(e *mesh.Engine, c *mesh.Call, a *Args) error { return e.ReduceScatter(c, a.In, a.Out) }),
		levelsRow(ReduceScatter, func(x *Exec, c Choice, a *Args) error {
			return algo.ReduceScatterHier(x.Op, a.In, a.Out, a.Count, x.Hier, c.Level0.Leg, *c.Level1.Vector)
		}),

		&Row{Coll: Gather, Name: "direct", Desc: "every rank sends its block straight to the root",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 { return m.direct(s) },
			Run: func(x *Exec, _ Choice, a *Args) error { return algo.GatherDirect(x.Op, a.In, a.Out, a.Root) }},
		&Row{Coll: Scatter, Name: "direct", Desc: "the root sends each rank its block straight",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 { return m.direct(s) },
			Run: func(x *Exec, _ Choice, a *Args) error { return algo.ScatterDirect(x.Op, a.In, a.Out, a.Root) }},
		&Row{Coll: AllToAll, Name: "pairwise", Desc: "n-1 steps; at step i rank r sends to r+i and receives from r-i",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 {
				l := m.flat(s)
				return float64(s.N-1) * (l.Latency + s.Bytes/float64(max(s.N, 1))/l.Bandwidth)
			},
			Run: func(x *Exec, _ Choice, a *Args) error {
				return algo.AllToAllPairwise(x.Op, a.In, a.Send, a.Out, a.Recv)
			}},
		&Row{Coll: Barrier, Name: "dissemination", Desc: "ceil(log2 n) rounds of empty frames to r+2^k",
			CanRun: always, Cost: func(m Model, s Shape, _ Choice) float64 { return float64(log2ceil(s.N)) * m.flat(s).Latency },
			Run: func(x *Exec, _ Choice, _ *Args) error { return algo.BarrierDissemination(x.Op) }},
		&Row{Coll: Barrier, Name: "mesh", Desc: "every rank posts its stamp in the shared region and waits for every peer's",
			Place: Node, CanRun: needsMesh(false),
			Cost: func(m Model, s Shape, _ Choice) float64 { return m.Host.HandOff },
			Run:  func(x *Exec, _ Choice, _ *Args) error { x.Call.Variant = mesh.OneShot; return x.Node.Barrier(x.Call) }},
	)
}

// The level1 forms of the allgather and reduce-scatter rows.
var (
	level1Ring = algo.Level1Ring
	level1RHD  = algo.Level1RHD
)

// level0Rows are the ways to run the hierarchical rows' intra-node legs.
var level0Rows = []*Level0Row{
	{Name: "ring", Desc: "ring legs inside the node: L-1 steps each", Leg: algo.Level0Ring,
		CanRun: func(Coll, Shape) error { return nil },
		Cost: func(m Model, coll Coll, s Shape) float64 {
			node := nodeShape(s)
			switch coll {
			case AllReduce:
				return m.level0AllReduce(s, false)
			case AllGather:
				return m.ring(node, node.N-1, node.Bytes/float64(node.N), false)
			}
			return m.ring(node, node.N-1, node.Bytes/float64(node.N), true)
		}},
	{Name: "rhd", Desc: "halving-doubling legs inside the node: log2 L steps each, power-of-two nodes", Leg: algo.Level0RHD,
		CanRun: func(_ Coll, s Shape) error {
			if s.PerNode&(s.PerNode-1) != 0 {
				return fmt.Errorf("halving-doubling needs a power-of-two node size, not %d", s.PerNode)
			}
			return nil
		},
		Cost: func(m Model, coll Coll, s Shape) float64 {
			node := nodeShape(s)
			switch coll {
			case AllReduce:
				return m.level0AllReduce(s, true)
			case AllGather:
				return m.rhd(node, node.Bytes, false)
			}
			return m.halving(node, node.Bytes)
		}},
	{Name: "mesh", Desc: "the node's shared-memory engine: no frames inside the node", Leg: algo.Level0Node,
		CanRun: func(coll Coll, s Shape) error {
			switch {
			case !s.Mesh.Level0:
				return fmt.Errorf("needs every node to be one host's ranks sharing memory")
			case coll != AllReduce && !s.Consecutive:
				return fmt.Errorf("needs nodes of consecutive ranks for the %s", coll)
			}
			return nil
		},
		Cost: meshLevel0},
}

// levelsRow is coll's hierarchical row: level0 inside each node, level1
// across, its legs from level0Rows and coll's level1 rows.
func levelsRow(coll Coll, run func(x *Exec, c Choice, a *Args) error) *Row {
	return &Row{Coll: coll, Name: "levels", Family: "levels", Place: Levels,
		Desc: "level0 inside each node, level1 across nodes on one rank per node and slice",
		CanRun: func(s Shape) error {
			if s.PerNode == 0 {
				return fmt.Errorf("hierarchical needs the same number of ranks on every node")
			}
			return nil
		},
		Cost: func(m Model, s Shape, c Choice) float64 {
			if s.N <= 1 || s.Bytes <= 0 {
				return 0
			}
			// The node's PerNode slices cross at once: each level1
			// group sees its share of the node's link.
			cross := m
			cross.Inter = m.shared(s.PerNode)
			return c.Level0.Cost(m, coll, s) + c.Level1.Cost(cross, crossShape(s), Choice{Row: c.Level1, Segment: c.Segment})
		},
		Run: run}
}

// meshRow is the engine's variant v of coll, named "mesh.<v>".
func meshRow(coll Coll, v mesh.Variant, desc string, cost func(Model, Shape, mesh.Variant) float64,
	run func(e *mesh.Engine, c *mesh.Call, a *Args) error) *Row {
	return &Row{Coll: coll, Name: "mesh." + v.String(), Family: "mesh", Desc: desc, Place: Node,
		CanRun: needsMesh(v == mesh.SingleCopy),
		Cost: func(m Model, s Shape, _ Choice) float64 {
			if s.N <= 1 || s.Bytes <= 0 {
				return 0
			}
			return cost(m, s, v)
		},
		Run: func(x *Exec, _ Choice, a *Args) error {
			x.Call.Variant = v
			return run(x.Node, x.Call, a)
		}}
}

// eagerRow limits the engine's eager row to what its slots carry
// (mesh.EagerBytes).
func eagerRow(r *Row) *Row {
	onMesh := r.CanRun
	r.CanRun = func(s Shape) error {
		if s.Bytes > mesh.EagerBytes {
			return fmt.Errorf("the eager schedule carries at most %d bytes, not %.0f", mesh.EagerBytes, s.Bytes)
		}
		return onMesh(s)
	}
	return r
}

// needsMesh is the engine rows' check: every rank on one engine, and for
// single copy two ranks that may read each other's memory.
func needsMesh(singleCopy bool) func(s Shape) error {
	return func(s Shape) error {
		switch {
		case !s.Mesh.Whole:
			return fmt.Errorf("needs every rank on one host, sharing memory (GOHCCL_TRANSPORT=auto or shm)")
		case singleCopy && s.Mesh.Ranks != 2:
			return fmt.Errorf("single copy runs on two ranks, not %d", s.Mesh.Ranks)
		case singleCopy && !s.Mesh.SingleCopy:
			return fmt.Errorf("needs cross-memory attach (process_vm_readv) between the ranks, which this host refuses")
		}
		return nil
	}
}

func always(Shape) error { return nil }

// powerOfTwo refuses groups whose size is not a power of two.
func powerOfTwo(what string) func(s Shape) error {
	return func(s Shape) error {
		if s.N&(s.N-1) != 0 {
			return fmt.Errorf("%s needs a power-of-two group, not %d ranks", what, s.N)
		}
		return nil
	}
}

// rooted runs a broadcast or reduce schedule over links, nothing to do for
// one rank or no bytes.
func rooted(f func(o *algo.Op, buf []byte, root int) error) func(x *Exec, _ Choice, a *Args) error {
	return func(x *Exec, _ Choice, a *Args) error {
		if x.Op.Size() == 1 || len(a.Buf) == 0 {
			return nil
		}
		return f(x.Op, a.Buf, a.Root)
	}
}

// level0AllReduce prices the hierarchical all-reduce's level0 legs over
// links: a reduce-scatter and an allgather of the node's buffer, ring or
// halving-doubling.
func (m Model) level0AllReduce(s Shape, rhd bool) float64 {
	L, S := s.PerNode, s.Bytes
	if L <= 1 {
		return 0
	}
	lf := float64(L)
	steps := float64(L-1) * m.frames(S/lf)
	if rhd {
		steps = math.Max((lf-1)/lf*S/float64(max(m.Segment, 1)), float64(log2floor(L)))
	}
	return 2*steps*m.Intra.Latency + 2*(lf-1)/lf*S/m.Intra.Bandwidth + (lf-1)/lf*S/m.ReduceBW
}

// bruck prices the Bruck allgather into an output of s.Bytes: round k
// sends min(2^k, n-2^k) blocks.
func (m Model) bruck(s Shape) float64 {
	l, block := m.flat(s), s.Bytes/float64(max(s.N, 1))
	var t float64
	for k := 0; k < log2ceil(s.N); k++ {
		b := float64(min(1<<k, s.N-1<<k)) * block
		t += m.frames(b)*l.Latency + b/l.Bandwidth
	}
	return t
}

// direct prices a gather or scatter of s.Bytes: the root receives or sends
// (n-1)/n of it, a frame per peer.
func (m Model) direct(s Shape) float64 {
	l := m.flat(s)
	return float64(s.N-1)*l.Latency + float64(s.N-1)/float64(max(s.N, 1))*s.Bytes/l.Bandwidth
}

// NodeLegs returns the engine's collectives as the hierarchical rows run
// their level0 on it (algo.NodeCollectives), under call c: the
// communicator sets them on its op once and fills c for every collective.
func NodeLegs(e *mesh.Engine, c *mesh.Call) algo.NodeCollectives { return &nodeLegs{e, c} }

type nodeLegs struct {
	e *mesh.Engine
	c *mesh.Call
}

func (n *nodeLegs) AllGather(own, node []byte) error {
	n.c.Variant = mesh.OneShot
	return n.e.AllGather(n.c, own, node)
}

func (n *nodeLegs) ReduceScatter(node, out []byte) error {
	n.c.Variant = mesh.OneShot
	return n.e.ReduceScatter(n.c, node, out)
}

func (n *nodeLegs) ReduceScatterBlocks(buf []byte, count int) error {
	n.c.Variant = mesh.OneShot
	return n.e.ReduceScatterBlocks(n.c, buf, count)
}

func (n *nodeLegs) AllGatherBlocks(buf []byte, count int) error {
	n.c.Variant = mesh.OneShot
	return n.e.AllGatherBlocks(n.c, buf, count)
}
