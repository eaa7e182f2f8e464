package tune

import (
	"math"

	"github.com/gohccl/gohccl/goimpl/mesh"
)

// The prices of the engine's rows (goimpl/mesh), from the host's measured
// figures (mesh.Figures): a hand-off h per wait, the copy rate r(x) for a
// working set of x bytes (which falls as x leaves the caches), the rate
// Cross at which a core reads lines another core has just written (still
// in that core's L2), the kernel's cross-memory copy rate k(x) and its
// per-call cost. docs/mesh.md derives each schedule's bytes; a price is its
// waits plus its memory traffic at the rate of the level it comes from:
//
//   - traffic over a rank's own message (its reads and writes of the
//     caller's buffer) at r of the working set of every local rank's
//     message, since the ranks share the last-level cache;
//   - traffic over the engine's buffers, which stay in the caches, at r of
//     one chunk;
//   - reads of a peer's data as soon as it is posted (still in the peer's
//     L2) at Cross; the one-shot schedules post ahead chunks ahead, so only
//     the first of their peer reads are that hot, the rest come from the
//     shared cache;
//   - the single-copy schedules' reads of the peer's message, in place, by
//     the kernel: what the peer wrote last (up to its L2) hot, the rest at
//     k of the working set.
//
// A copy moves a byte in and a byte out: traffic t at copy rate r takes
// t/(2r). Where ranks outnumber the cores they run on (MeshShape.Share),
// the cores do every rank's traffic in turns: it costs Share times as
// much. (At 4 ranks on 2 cores the one-shot all-reduce of 16 MiB, priced
// 6.5 ms without this, took 17 ms and the two-phase 7 ms.) The waits that
// begin a phase (the first of a pipeline, each of a schedule that posts
// nothing ahead) cost a hand-off, which was measured under the same
// crowding. The later waits of a pipeline cost a hand-off each where every
// rank has a core, and nothing where they are crowded: the waiting rank's
// core runs a peer whose work the Share factor has priced already. Priced
// a hand-off each there too, the two-phase all-reduce's wait a chunk made
// the choice between it and the one-shot follow the hand-off measured at
// init (3-10 us between jobs): the one-shot was taken for 16 MiB, 1.35x
// slower, in 1 job of 8 and 2 of 10, and, with that VM's other figures,
// for 1 MiB whenever the hand-off came out above 6 us.

// aheadChunks mirrors the engine's posting distance (mesh's ahead).
const aheadChunks = 8

// meshCost holds what the prices of one shape use.
type meshCost struct {
	f     mesh.Figures
	n     float64 // local ranks
	chunk float64 // bytes of message per chunk
	share float64 // ranks per core, at least 1
	later float64 // seconds of each later wait of a pipeline
}

func newMeshCost(m Model, s Shape) meshCost {
	c := meshCost{f: m.Host, n: float64(max(s.Mesh.Ranks, 1)), chunk: float64(max(s.Mesh.Chunk, 64)),
		share: max(s.Mesh.Share, 1), later: m.Host.HandOff}
	if c.share > 1 {
		c.later = 0 // the core runs a peer meanwhile (above)
	}
	return c
}

// waits prices w waits that begin a phase.
func (c meshCost) waits(w float64) float64 { return w * c.f.HandOff }

// laterWaits prices w later waits of a pipeline.
func (c meshCost) laterWaits(w float64) float64 { return w * c.later }

// pipelined prices the waits of a schedule that posts ahead chunks ahead
// of the one it reads, over chunks chunks: the first wait in full, then a
// rank waits only when its peers fall a whole window behind, so the later
// waits overlap ahead at a time.
func (c meshCost) pipelined(chunks, ahead float64) float64 {
	return c.waits(1) + c.laterWaits((chunks-1)/ahead)
}

// chunks returns how many chunks carry S bytes (at least one).
func (c meshCost) chunks(S float64) float64 { return math.Max(1, math.Ceil(S/c.chunk)) }

// own prices traffic t over the ranks' own messages of S bytes each.
func (c meshCost) own(t, S float64) float64 { return c.share * t / (2 * c.f.CopyRate(c.n*S)) }

// region prices traffic t over the engine's buffers.
func (c meshCost) region(t float64) float64 { return c.share * t / (2 * c.f.CopyRate(c.chunk)) }

// hot prices reading x bytes a peer posted just before.
func (c meshCost) hot(x float64) float64 { return c.share * x / c.f.Cross }

// posted prices reading x bytes peers posted ahead: the first aheadChunks
// chunks hot, the rest from the shared cache.
func (c meshCost) posted(x float64) float64 {
	hot := math.Min(x, aheadChunks*c.chunk)
	return c.hot(hot) + c.share*(x-hot)/c.f.CopyRate(4*float64(c.f.L2))
}

// kernel prices reading x bytes of a peer's message of S bytes with the
// kernel's cross-memory copy in calls system calls: what the peer wrote
// last, up to its L2, at the slower of Cross and the kernel's rate for that
// much; the rest at the kernel's rate for the working set.
func (c meshCost) kernel(x, S, calls float64) float64 {
	if x <= 0 {
		return 0
	}
	hot := math.Min(x, float64(c.f.L2))
	return calls*c.f.Syscall + c.share*(hot/math.Min(c.f.Cross, c.f.KernelRate(hot))+(x-hot)/c.f.KernelRate(c.n*S))
}

// singleCopyReads is how many system calls the single-copy all-reduce
// makes to read the peer's half through its 256 KiB scratch.
func singleCopyReads(S float64) float64 { return math.Max(1, math.Ceil(S/2/(256<<10))) }

// meshAllReduce prices the engine's all-reduce variants on S bytes per rank.
func meshAllReduce(m Model, s Shape, v mesh.Variant) float64 {
	c, S := newMeshCost(m, s), s.Bytes
	n := c.n
	switch v {
	case mesh.TwoPhase:
		// Two waits a chunk, the first chunk's both in full; after it a
		// rank posts the next chunk's pieces before it copies this one's
		// results out, so one wait a chunk overlaps its peers' work. The
		// message: its pieces read to be copied in, the own piece read,
		// the result written (2S); the buffers: pieces and the reduced
		// piece written (S); the peers' pieces and reduced pieces read
		// hot.
		return c.waits(2) + c.laterWaits(c.chunks(S)-1) + c.own(2*S, S) + c.region(S) + c.hot(2*(n-1)/n*S)
	case mesh.SingleCopy:
		// Three waits. The peer's half read by the kernel into the
		// scratch, reduced into the own half in place (the message: read
		// S/2, written S/2; the scratch: written and read, S), then the
		// peer's reduced half, fresh in its cache, read by the kernel
		// into the message (written S/2).
		return c.waits(3) + c.kernel(S/2, S, singleCopyReads(S)) + c.kernel(S/2, S, 1) + c.own(1.5*S, S) + c.region(S)
	}
	// One wait a chunk. The message read to be copied in, read again and
	// written by the reduction (3S); the buffer written (S); every peer's
	// input read as posted.
	return c.pipelined(c.chunks(S), aheadChunks) + c.own(3*S, S) + c.region(S) + c.posted((n-1)*S)
}

// meshReduce prices the engine's reduce: the root's share, the all-reduce's.
func meshReduce(m Model, s Shape, v mesh.Variant) float64 {
	return meshAllReduce(m, s, v)
}

// round prices an end-of-op round, in which a rank waits for every peer's
// stamp, posted as the peer entered the op: where every rank has a core
// the stamps are there by then; where ranks share cores, the last peer
// must first be scheduled, a hand-off. (On 4 ranks sharing 2 cores, a
// stream of 4 KiB broadcasts took 24-38 us an op with the one-shot's round
// and 6.5-7.8 us without it and with the eager schedule's depth.)
func (c meshCost) round() float64 {
	if c.share > 1 {
		return c.waits(1)
	}
	return 0
}

// meshBroadcast prices the engine's broadcast of S bytes.
func meshBroadcast(m Model, s Shape, v mesh.Variant) float64 {
	c, S := newMeshCost(m, s), s.Bytes
	switch v {
	case mesh.SingleCopy:
		return c.waits(2) + c.kernel(S, S, 1) + c.own(S, S)
	case mesh.Eager:
		// A chunk a slot, no round: the root copies the message into
		// its slots, the readers copy each out as soon as it is posted.
		return c.pipelined(math.Max(1, math.Ceil(S/mesh.EagerSlot)), aheadChunks) + c.own(S, S) + c.region(S) + c.hot(S)
	}
	// A chunk spans every rank's buffer (n chunks' worth); the readers
	// copy out what the root has just copied in: the root reads the
	// message, a reader writes it, both at once. The last chunk ends
	// with the round in which every rank checks every stamp.
	return c.pipelined(math.Max(1, math.Ceil(S/(c.n*c.chunk))), aheadChunks) + c.round() + c.own(S, S) + c.region(S) + c.hot(S)
}

// meshAllGather prices the engine's allgather into an output of S bytes.
func meshAllGather(m Model, s Shape, v mesh.Variant) float64 {
	c, S := newMeshCost(m, s), s.Bytes
	in := S / c.n
	if v == mesh.SingleCopy {
		// The own block copied into the output, the peer's read by the
		// kernel straight into it.
		return c.waits(2) + c.own(2*in, in) + c.kernel(in, in, 1) + c.own(in, in)
	}
	// The input read and written into the buffer and the own block; every
	// peer's block read as posted and written into the output.
	return c.pipelined(c.chunks(in), aheadChunks) + c.own(in+S, in) + c.region(in) + c.posted((c.n-1)*in)
}

// meshReduceScatter prices the engine's reduce-scatter of an input of S
// bytes: each rank copies its pieces of the other blocks into its buffer
// and reduces its own block's pieces as posted, one wait a piece of chunk.
func meshReduceScatter(m Model, s Shape) float64 {
	c, S := newMeshCost(m, s), s.Bytes
	n := c.n
	out := S / n
	pieces := math.Max(1, math.Ceil(out/(c.chunk/n)))
	return c.pipelined(pieces, aheadChunks) + c.own((n-1)/n*S+2*out, out) + c.region((n-1)/n*S) + c.posted((n-1)*out)
}

// meshLevel0 prices the engine as level0 of coll's hierarchical row on one
// node of s (s.Bytes the whole buffer of one rank): the all-reduce's
// reduce-scatter and allgather of the node's blocks, or the allgather's
// and reduce-scatter's leg over the node's slices.
func meshLevel0(m Model, coll Coll, s Shape) float64 {
	node := nodeShape(s)
	switch coll {
	case AllReduce:
		return meshReduceScatter(m, node) + meshAllGather(m, node, mesh.OneShot)
	case AllGather:
		return meshAllGather(m, node, mesh.OneShot)
	}
	return meshReduceScatter(m, node)
}
