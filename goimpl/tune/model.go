package tune

import (
	"math"
	"math/bits"

	"github.com/gohccl/gohccl/goimpl/mesh"
)

// Link is the alpha-beta figure of one class of link.
type Link struct {
	Latency   float64 // seconds per step (alpha)
	Bandwidth float64 // bytes per second one rank sends and receives at once (1/beta)
}

// Model holds the figures the tuner prices with.
type Model struct {
	Intra Link // between ranks of one node
	Inter Link // between nodes
	// NodeBW is each node's link to the others in bytes per second each
	// way, shared by the traffic of all its ranks across nodes (one NIC
	// per host); 0: every rank has a link of its own (one NIC per rank).
	NodeBW float64
	// ReduceBW is the speed of the reduce kernels in bytes of input per
	// second (memory bound beyond the caches, DESIGN.md).
	ReduceBW float64
	// Segment is the streaming unit of the schedules over links, in
	// bytes: the tuner sets it to each candidate segment in turn.
	Segment int
	// Host is this host's measured memory figures, which price the
	// engine's rows (mesh.go); invalid where the ranks share no memory.
	Host mesh.Figures
}

// DefaultModel is the CPU build's figures: loopback TCP or shared memory
// inside a host, a 10 Gb/s network between hosts.
func DefaultModel() Model {
	return Model{
		Intra:    Link{Latency: 5e-6, Bandwidth: 3e9},
		Inter:    Link{Latency: 20e-6, Bandwidth: 1.25e9},
		ReduceBW: 20e9,
		Segment:  1 << 20,
	}
}

// LinkHandOffs is how many of the host's hand-offs a frame between two of
// its ranks costs at least: the peer's receive goroutine wakes to copy it
// out of the ring or socket (goimpl/transport/shm), then wakes the peer's
// goroutine waiting in the collective, where a post to the engine wakes
// that goroutine alone. Priced at one, a host whose hand-off was measured
// under load (a scheduler slice, 2 ms, with three ranks and three busy
// threads on 2 cores) had its tree broadcast and all-reduce of 24 KiB
// priced under the engine's one-shot (2.0 against 3.2 ms, 4.0 against 6.2)
// and chosen.
const LinkHandOffs = 2

// WithHost returns m pricing the engine's rows from the host's figures f
// and, where f is valid (the ranks share memory), the links between ranks
// of the host at no less than LinkHandOffs of its hand-offs a step.
func (m Model) WithHost(f mesh.Figures) Model {
	m.Host = f
	if f.Valid() {
		m.Intra.Latency = max(m.Intra.Latency, LinkHandOffs*f.HandOff)
	}
	return m
}

// Shape is what a price depends on: the group, its nodes, the engines its
// hosts share, the bytes.
type Shape struct {
	N       int // ranks
	Nodes   int // nodes
	PerNode int // ranks per node if every node has as many, else 0
	// Consecutive: each node's ranks are consecutive (ring crosses nodes
	// Nodes times; halving-doubling's short distances stay inside a node).
	Consecutive bool
	// Mesh says what shared-memory engines the group has.
	Mesh MeshShape
	// Bytes is the all-reduce/broadcast/reduce buffer, the allgather
	// output, the reduce-scatter input.
	Bytes float64
}

// MeshShape is what the communicator found of shared memory: the facts
// every rank agrees on (bootstrap exchanges them), so that every rank
// prices the engine's rows alike.
type MeshShape struct {
	// Whole: every rank of the group shares one engine, so the engine's
	// rows run the whole collective.
	Whole bool
	// Level0: every node is exactly the ranks of one engine, in rank
	// order, so a hierarchical row may run its level0 on the engines.
	Level0 bool
	// Ranks is the ranks of one engine (of each, for Level0).
	Ranks int
	// SingleCopy: the engine's two ranks may read each other's memory.
	SingleCopy bool
	// Chunk is the bytes of a message one chunk of the engine carries
	// (mesh.ChunkBytes).
	Chunk int
	// Share is how many of the group's ranks each core of the engine's
	// machine runs: its ranks over the cores they may run on together,
	// 1 (or 0: unknown) when each has a core. Ranks that share a core take
	// turns at their copies and reductions.
	Share float64
}

// flat returns the link a flat algorithm over the whole group is bound by:
// between nodes as soon as there are two.
func (m Model) flat(s Shape) Link {
	if s.Nodes > 1 {
		return m.Inter
	}
	return m.Intra
}

// frames returns how many segments carry b bytes in one exchange: each costs
// a latency, since the exchange sends segment j+1 only once segment j from
// its other peer is in (at least one, even for an empty step).
func (m Model) frames(b float64) float64 {
	if m.Segment <= 0 {
		return 1
	}
	return math.Max(1, math.Ceil(b/float64(m.Segment)))
}

// shared returns the inter-node link as each of k ranks of a node sees it
// while all of them cross at once: their node's link split k ways, where
// that is less than a rank's own.
func (m Model) shared(k int) Link {
	l := m.Inter
	if m.NodeBW > 0 && k > 1 {
		l.Bandwidth = math.Min(l.Bandwidth, m.NodeBW/float64(k))
	}
	return l
}

func log2floor(n int) int { return bits.Len(uint(n)) - 1 }
func log2ceil(n int) int  { return bits.Len(uint(n - 1)) }

// pipelined prices a tree with depth d streaming b bytes in segments, each
// segment costing perSeg bytes on the busiest rank's link per phase.
func (m Model) pipelined(l Link, depth int, b float64, perSeg float64) float64 {
	seg := math.Min(float64(m.Segment), b)
	if seg <= 0 {
		return 0
	}
	nseg := math.Ceil(b / seg)
	return float64(depth)*l.Latency + (float64(depth)+nseg-1)*perSeg*seg/l.Bandwidth
}

// hops prices one segment of seg bytes crossing one edge of a ring or chain
// in rank order on s: avg is the average over the ring's edges of latency
// plus serialization, slowest the serialization on its slowest edge. Across
// nodes whose ranks are consecutive only Nodes of the ring's N edges join
// two nodes; otherwise every edge is taken to (the worst case).
func (m Model) hops(s Shape, seg float64) (avg, slowest float64) {
	hop := func(l Link) float64 { return l.Latency + seg/l.Bandwidth }
	if s.Nodes <= 1 {
		return hop(m.Intra), seg / m.Intra.Bandwidth
	}
	n, cross := float64(s.N), float64(s.N)
	if s.Consecutive {
		cross = float64(s.Nodes)
	}
	return (cross*hop(m.Inter) + (n-cross)*hop(m.Intra)) / n, seg / math.Min(m.Inter.Bandwidth, m.Intra.Bandwidth)
}

// ring prices steps ring steps that each move chunk bytes from every rank
// to the next, reducing on arrival when reducing. A rank sends segment j+1
// only once segment j from the previous rank is in (and reduced), so the
// segments form one chain of hops that goes round the ring, one edge per
// hop: it pays the average edge, not the slowest, steps x frames times.
// The slowest edge carries every segment in turn too; when serializing them
// takes longer than the chain it sets the pace instead. (Charging every hop
// the slowest edge, as this model once did, priced a flat ring over 4 nodes
// x 8 ranks at 3.3x its simulated time for 64 KiB.)
func (m Model) ring(s Shape, steps int, chunk float64, reducing bool) float64 {
	f := m.frames(chunk)
	seg := chunk / f
	avg, slowest := m.hops(s, seg)
	if reducing {
		avg += seg / m.ReduceBW
	}
	return float64(steps) * f * math.Max(avg, slowest)
}

// chain prices a pipelined chain of depth edges in rank order streaming b
// bytes in segments: the first segment takes depth hops, each later one
// follows at the pace of the slowest edge.
func (m Model) chain(s Shape, depth int, b float64) float64 {
	seg := math.Min(float64(m.Segment), b)
	if seg <= 0 {
		return 0
	}
	avg, slowest := m.hops(s, seg)
	return float64(depth)*avg + (math.Ceil(b/seg)-1)*slowest
}

// rhd prices recursive halving-doubling (both halves when full, the
// doubling allgather alone otherwise).
func (m Model) rhd(s Shape, S float64, full bool) float64 {
	if !full {
		return m.rhdSteps(s, S, false)
	}
	t := m.rhdSteps(s, S, true) + m.rhdSteps(s, S, false)
	if s.N > 1<<log2floor(s.N) {
		// Fold and unfold: one-way transfers of S that stream, the fold
		// reduced segment by segment as it arrives.
		l := m.foldLink(s)
		t += 2*l.Latency + math.Max(S/l.Bandwidth, S/m.ReduceBW) + S/l.Bandwidth
	}
	return t
}

// rhdSteps prices the log2 p halving steps (reducing) or doubling steps of
// S bytes. Step k exchanges over distance p>>(k+1) in virtual ranks, which
// stays inside a node when the nodes' ranks are consecutive and the
// distance is below the node size.
func (m Model) rhdSteps(s Shape, S float64, reducing bool) float64 {
	p := 1 << log2floor(s.N)
	var t float64
	for k := 0; k < log2floor(s.N); k++ {
		d := p >> (k + 1)
		l := m.rhdLink(s, d)
		b := S * float64(d) / float64(p)
		t += m.frames(b)*l.Latency + b/l.Bandwidth
		if reducing {
			t += b / m.ReduceBW
		}
	}
	return t
}

// nodeShape is the shape of one node's level0 group of s moving its Bytes:
// PerNode ranks on the intra-node link, sharing an engine where every node
// is one.
func nodeShape(s Shape) Shape {
	n := Shape{N: s.PerNode, Nodes: 1, PerNode: s.PerNode, Consecutive: true, Bytes: s.Bytes}
	if s.Mesh.Level0 {
		n.Mesh = s.Mesh
		n.Mesh.Whole, n.Mesh.Level0 = true, false
	}
	return n
}

// crossShape is the shape of a level1 group of s, one rank per node, moving
// the slice of s.Bytes that one local rank owns: Bytes/PerNode.
func crossShape(s Shape) Shape {
	return Shape{N: s.Nodes, Nodes: s.Nodes, PerNode: 1, Consecutive: true, Bytes: s.Bytes / float64(max(s.PerNode, 1))}
}

// halving prices the recursive-halving reduce-scatter of S bytes. Its
// virtual blocks follow the ranks (a folded pair's is two ranks' blocks), so
// at step k, distance d, the larger half holds d+min(d, e) of the n blocks;
// with folding, the whole input goes in one way, reduced as it streams, and
// one block comes back.
func (m Model) halving(s Shape, S float64) float64 {
	p := 1 << log2floor(s.N)
	e, nf := s.N-p, float64(s.N)
	var t float64
	for k := 0; k < log2floor(s.N); k++ {
		d := p >> (k + 1)
		l := m.rhdLink(s, d)
		b := S * float64(d+min(d, e)) / nf
		t += m.frames(b)*l.Latency + b/l.Bandwidth + b/m.ReduceBW
	}
	if e > 0 {
		l := m.foldLink(s)
		t += 2*l.Latency + math.Max(S/l.Bandwidth, S/m.ReduceBW) + S/nf/l.Bandwidth
	}
	return t
}

// rhdLink is the link of a halving or doubling exchange over distance d in
// virtual ranks: inside a node when the nodes' ranks are consecutive and the
// partners' distance in ranks, d, or up to 2d when folded ranks sit between
// virtual ranks, is below the node size; else the flat link, which every
// rank of a node crosses at once when the nodes are consecutive and even.
func (m Model) rhdLink(s Shape, d int) Link {
	if s.N&(s.N-1) != 0 {
		d *= 2
	}
	if s.Nodes > 1 && s.Consecutive && s.PerNode > 0 {
		if d < s.PerNode {
			return m.Intra
		}
		return m.shared(s.PerNode)
	}
	return m.flat(s)
}

// foldLink is the link a fold pair (2i, 2i+1) uses: inside a node when the
// nodes' ranks are consecutive and their size is even, else the flat link.
func (m Model) foldLink(s Shape) Link {
	if s.Nodes > 1 && s.Consecutive && s.PerNode > 0 && s.PerNode%2 == 0 {
		return m.Intra
	}
	return m.flat(s)
}
