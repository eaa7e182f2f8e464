package mesh

import (
	"github.com/gohccl/gohccl/goimpl/shm"
)

// The constants of the engine's protocol. Each is the same on every local
// rank (they decide the region's layout), so they are constants of the
// build, not settings. docs/mesh.md has the measurements behind each value.
const (
	// depth is the number of pipeline buffers per rank: chunk k uses buffer
	// k%depth, so a rank may run up to depth-1 chunks ahead of the slowest
	// peer that still reads its buffers.
	depth = 16

	// ahead is how many chunks past the one it reads a rank has posted
	// (one-shot all-reduce, allgather, reduce-scatter): the bytes a peer
	// reads were written ahead*Chunk bytes of copying earlier, long
	// enough for them to have left the writer's L2 for the shared L3. A
	// core reads another core's L2-resident lines at about 8 GB/s on this
	// machine (Zen 4) and L3-resident ones at 25-35; two processes of a
	// one-shot 1 MiB all-reduce took 156-173 us one chunk ahead and 57-67
	// us eight chunks ahead (docs/mesh.md). It must stay below depth so
	// that a post never waits on a buffer the rank itself still reads.
	ahead = depth / 2

	// stamps is the number of stamp lines per rank: chunk k's stamp goes
	// in line k%stamps. It is also the number of eager slots per rank, so
	// an eager broadcast's root runs up to stamps-1 chunks ahead of the
	// slowest reader. On 4 ranks sharing 2 cores, a stream of 4 KiB
	// broadcasts without the end-of-op round took 24-38 us an op with 16
	// slots (the root waits for a reader as often as with the round) and
	// 6.5-7.8 us with 64 (docs/mesh.md). A multiple of depth.
	stamps = 64
)

// EagerSlot is the bytes of one eager slot: an eager broadcast is a chunk
// per slot's worth of its message. The eager area takes stamps slots per
// rank (512 KiB), which stays in the shared cache while readers trail the
// root (with 64 KiB slots, 4 MiB, the 4-rank 64 KiB broadcast took 15-108
// us a job).
const EagerSlot = 8 << 10

// EagerBytes is the largest broadcast the eager schedule carries: eight
// slots, so the root of the largest still runs seven broadcasts ahead.
const EagerBytes = stamps / 8 * EagerSlot

// Options are one engine's tunables. They travel with the communicator that
// attaches the engine, never through package state, so two communicators of
// one process may differ. Every local rank of one region must pass the same
// Chunk (it decides the layout, which each rank checks against its peers').
//
// Which schedule runs an operation is not among them: the caller names it
// in Call.Variant (goimpl/tune prices every variant).
type Options struct {
	// Chunk caps the bytes of one pipeline buffer of one rank, which is
	// the bytes of the message one chunk covers. A chunk's data (this
	// rank's part of the message, its buffer, the peers' buffers it reads)
	// must stay in the core's L2 while the next chunk streams in: larger
	// chunks fall out to L3 and memory between the copy in and the
	// reduction; smaller ones pay the waits (0.3-1 us each) more often.
	// Measured with two processes at 16 and 64 MiB: 32 KiB 4.1 GB/s,
	// 64 KiB 5.4-5.6, 96 KiB 5.3-6.0, 128 KiB 4.5-4.6 (docs/mesh.md).
	Chunk int

	// StreamMin is the output size from which allgather and broadcast
	// write the data they copy out of the region with non-temporal stores
	// (stream): an output that large will not be in cache when the caller
	// reads it anyway, and a normal store into a line that is not in cache
	// first reads the line from memory, a third more memory traffic.
	// Smaller outputs stay in cache for the caller.
	StreamMin int

	// Wait is how the engine's waits spin, yield and sleep.
	Wait shm.Policy
}

// DefaultOptions returns the tunables of a host with a core per local rank.
func DefaultOptions() Options {
	return Options{Chunk: 64 << 10, StreamMin: 4 << 20, Wait: shm.DefaultPolicy}
}

// normal fills the zero fields of o with the defaults.
func (o Options) normal() Options {
	d := DefaultOptions()
	if o.Chunk <= 0 {
		o.Chunk = d.Chunk
	}
	if o.StreamMin <= 0 {
		o.StreamMin = d.StreamMin
	}
	if o.Wait == (shm.Policy{}) {
		o.Wait = d.Wait
	}
	return o
}

// MinBudget is the smallest data area a region is laid out for; RegionSize
// and Attach treat smaller budgets as this.
const MinBudget = 64 << 10

// lineSize is the unit of the region's control area: each counter, info
// record and stamp takes a cache line of its own, so that ranks writing
// different ones never share a line.
const lineSize = shm.CounterSize

// A region is laid out as
//
//	control: per local rank r, 4+stamps+textLines lines:
//	    ready[r]   counter: r's writes for chunk k are visible (2k+1 inputs, 2k+2 results)
//	    free[r]    counter: r has finished reading every buffer of chunk k (k+1)
//	    info[r]    r's layout as it computed it, and its state (attached, failed, closed)
//	    stamp[r][s] the stamp r posted for the last chunk k with k%stamps == s
//	    text[r]    why r failed, once it has (textLines lines)
//	    probe[r]   counter: the hand-off probe at attach (MeasureHandOff)
//	data, from a page boundary: per local rank r, depth buffers of buf bytes,
//	    each split into n pieces of piece bytes;
//	eager: per local rank r, stamps slots of EagerSlot bytes, which only
//	    r writes (eager broadcasts it roots).
//
// Only the numbers below decide where anything is: no offset or size is ever
// read from the region.
type layout struct {
	n        int
	piece    int // bytes of one piece: one rank's share of a two-phase chunk
	buf      int // bytes of one pipeline buffer: n pieces
	rankCtl  int // bytes of one rank's control block
	dataOff  int // where the buffers start
	eagerOff int // where the eager slots start
	size     int // the region's bytes
}

// Control lines within a rank's control block.
const (
	lineReady = 0
	lineFree  = 1
	lineInfo  = 2
	lineStamp = 3 // stamps lines from here
	lineText  = lineStamp + stamps
	lineProbe = lineText + textLines

	// textLines bounds the failure text a rank leaves for its peers.
	textLines = 16
)

func newLayout(n, budget, chunk int) layout {
	budget = max(budget, MinBudget)
	// n ranks hold depth buffers of n pieces each: n*n*depth pieces share
	// the budget. Pieces are whole cache lines, so that no two ranks ever
	// write one line and every element size divides them.
	piece := budget / (n * n * depth) / lineSize * lineSize
	piece = min(piece, chunk/n/lineSize*lineSize)
	piece = max(piece, lineSize) // past n = 16 at the minimum budget, the budget is exceeded
	l := layout{n: n, piece: piece, buf: n * piece, rankCtl: (lineProbe + 1) * lineSize}
	l.dataOff = (n*l.rankCtl + 4095) &^ 4095
	l.eagerOff = l.dataOff + n*depth*l.buf
	l.size = l.eagerOff + n*stamps*EagerSlot
	return l
}

// RegionSize returns the bytes of the shared region for n local ranks whose
// data area is bounded by budget bytes (GOHCCL_BUFFSIZE; below MinBudget it
// is MinBudget). Messages larger than the data area stream through it. The
// data area is at most min(budget, n*depth*o.Chunk); only past 16 local
// ranks at the minimum budget does the floor of one cache line per piece
// make it larger than budget. The eager slots come on top: n*stamps*
// EagerSlot.
func RegionSize(n, budget int, o Options) int {
	if n < 1 {
		return 0
	}
	return newLayout(n, budget, o.normal().Chunk).size
}

// ChunkBytes returns the bytes of the message one chunk of the one-shot
// schedules covers among n local ranks with these options and budget; the
// two-phase schedules' chunks cover the same bytes, a piece of each block.
// The tuner prices the waits per chunk with it.
func ChunkBytes(n, budget int, o Options) int {
	return newLayout(n, budget, o.normal().Chunk).buf
}

// ctl returns the offset of line i of rank r's control block.
func (l *layout) ctl(r, i int) int { return r*l.rankCtl + i*lineSize }

// data returns the offset of rank r's buffer b.
func (l *layout) data(r, b int) int { return l.dataOff + (r*depth+b)*l.buf }

// eager returns the offset of rank r's eager slot s.
func (l *layout) eager(r, s int) int { return l.eagerOff + (r*stamps+s)*EagerSlot }

// plainCopy is copy as a function value, the alternative to stream.
func plainCopy(dst, src []byte) { copy(dst, src) }
