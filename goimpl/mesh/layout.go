package mesh

import (
	"math"

	"github.com/gohccl/gohccl/goimpl/shm"
)

// The tunables of the engine, in one place. Each is the same on every local
// rank (they decide the region's layout and how many chunks an operation
// takes), so they are constants of the build, not settings. docs/mesh.md
// has the measurements behind each value.
const (
	// depth is the number of pipeline buffers per rank: chunk k uses buffer
	// k%depth, so a rank may run up to depth-1 chunks ahead of the slowest
	// peer that still reads its buffers.
	depth = 16

	// ahead is how many chunks past the one it reads a rank has posted
	// (one-shot all-reduce, allgather, reduce-scatter): the bytes a peer
	// reads were written ahead*maxChunk bytes of copying earlier, long
	// enough for them to have left the writer's L2 for the shared L3. A
	// core reads another core's L2-resident lines at about 8 GB/s on this
	// machine (Zen 4) and L3-resident ones at 25-35; two processes of a
	// one-shot 1 MiB all-reduce took 156-173 us one chunk ahead and 57-67
	// us eight chunks ahead (docs/mesh.md). It must stay below depth so
	// that a post never waits on a buffer the rank itself still reads.
	ahead = depth / 2
)

// The schedule tunables are variables only so that the tests can run every
// schedule at every rank count (and measure others); nothing else sets them,
// and two processes of one build always agree on them.
var (
	// maxChunk caps the bytes of one pipeline buffer of one rank, which is
	// the bytes of the message one chunk covers. A chunk's data (this
	// rank's part of the message, its buffer, the peers' buffers it reads)
	// must stay in the core's 512 KiB L2 while the next chunk streams in:
	// larger chunks fall out to L3 and memory between the copy in and the
	// reduction; smaller ones pay the waits (0.3-1 us each) more often.
	// Measured with two processes at 16 and 64 MiB: 32 KiB 4.1 GB/s,
	// 64 KiB 5.4-5.6, 96 KiB 5.3-6.0, 128 KiB 4.5-4.6 (docs/mesh.md).
	maxChunk = 64 << 10

	// oneShotPair is the largest all-reduce (bytes per rank) that runs
	// one-shot at two local ranks: all of them. At n = 2 both schedules
	// read every peer byte once across cores, one-shot makes two passes
	// over the message against two-phase's two, and waits once per chunk
	// instead of twice; it measured faster at every size from 4 KiB to
	// 64 MiB.
	oneShotPair = math.MaxInt

	// singleCopyMin and singleCopyMax bound the all-reduces (bytes per
	// rank) that two local ranks run with the single-copy schedule when
	// cross-memory attach works between them. Measured through the C ABI
	// on an Intel Xeon (2 MiB L2), alternating builds, against one-shot:
	// 2 MiB 387-395 us against 354-360, 4 MiB 580-586 against 650-661,
	// 8 MiB 1.05-1.13 ms against 1.27-1.33, 16 MiB 2.24-2.30 against
	// 2.77, 32 MiB 5.4-6.1 against 5.3-5.5, 64 MiB 15.3-17.8 against
	// 12.5-12.8: below, the system calls and the extra waits cost more
	// than the third of the bytes it saves; above, the kernel's copy of
	// pages that are out of cache loses to the engine's.
	singleCopyMin = 4 << 20
	singleCopyMax = 16 << 20

	// gatherSingleCopyMin and gatherSingleCopyMax are the same bounds for
	// AllGather (bytes of each rank's input), where single copy reads half
	// the bytes of the copy through the region. Same machine, against the
	// region: 64 KiB 6.6-7.6 us against 9.5-19.6, 256 KiB 19-20 against
	// 35-36, 1 MiB 154-160 against 188-189, 4 MiB 756 against 1006-1073,
	// 16 MiB 3.3-3.6 ms against 4.5-4.7, 64 MiB 24-25 against 19.6; 4-16
	// KiB the same either way.
	gatherSingleCopyMin = 64 << 10
	gatherSingleCopyMax = 16 << 20

	// bcastSingleCopyMin and bcastSingleCopyMax are the same bounds for
	// Broadcast, where the reader's one copy replaces the root's copy in
	// and the reader's copy out. Same machine, against the region: 256 KiB
	// 11.8-12.0 us against 17.4-19.6, 1 MiB 56 against 70-71, 4 MiB 356-418
	// against 399, 16 MiB 1.40-1.46 ms against 1.80-1.81, 64 MiB 11.9-12.1
	// against 7.2-7.3; 16-64 KiB either way within the noise.
	bcastSingleCopyMin = 256 << 10
	bcastSingleCopyMax = 16 << 20

	// oneShotMax is the same limit for three or more local ranks. There
	// one-shot reads (n-1)S bytes across cores against two-phase's
	// 2(n-1)/n S, and the extra (n-1)(n-2)/n S outweighs two-phase's
	// second wait (about 1 us, or some 10 KB at the cross-core rate) from
	// about 16 KiB at n = 3 down. This machine has two cores, so the value
	// comes from that model, not from a measurement.
	oneShotMax = 16 << 10

	// reducePair and reduceMax are the same limits for Reduce, where
	// one-shot means the root alone reduces every input (the others only
	// copy theirs in).
	reducePair = math.MaxInt
	reduceMax  = 16 << 10

	// streamMin is the output size from which allgather and broadcast
	// write the data they copy out of the region with non-temporal stores
	// (stream): an output that large will not be in cache when the caller
	// reads it anyway, and a normal store into a line that is not in cache
	// first reads the line from memory, a third more memory traffic.
	// Smaller outputs stay in cache for the caller.
	streamMin = 4 << 20
)

// MinBudget is the smallest data area a region is laid out for; RegionSize
// and Attach treat smaller budgets as this.
const MinBudget = 64 << 10

// lineSize is the unit of the region's control area: each counter, info
// record and stamp takes a cache line of its own, so that ranks writing
// different ones never share a line.
const lineSize = shm.CounterSize

// A region is laid out as
//
//	control: per local rank r, 3+depth+textLines lines:
//	    ready[r]   counter: r's writes for chunk k are visible (2k+1 inputs, 2k+2 results)
//	    free[r]    counter: r has finished reading every buffer of chunk k (k+1)
//	    info[r]    r's layout as it computed it, and its state (attached, failed, closed)
//	    stamp[r][b] the stamp of the chunk r last wrote into buffer b, one line per buffer
//	    text[r]    why r failed, once it has (textLines lines)
//	data, from a page boundary: per local rank r, depth buffers of buf bytes,
//	    each split into n pieces of piece bytes.
//
// Only the numbers below decide where anything is: no offset or size is ever
// read from the region.
type layout struct {
	n       int
	piece   int // bytes of one piece: one rank's share of a two-phase chunk
	buf     int // bytes of one pipeline buffer: n pieces
	rankCtl int // bytes of one rank's control block
	dataOff int // where the buffers start
	size    int // the region's bytes
}

// Control lines within a rank's control block.
const (
	lineReady = 0
	lineFree  = 1
	lineInfo  = 2
	lineStamp = 3 // depth lines from here
	lineText  = lineStamp + depth

	// textLines bounds the failure text a rank leaves for its peers.
	textLines = 16
)

func newLayout(n, budget int) layout {
	budget = max(budget, MinBudget)
	// n ranks hold depth buffers of n pieces each: n*n*depth pieces share
	// the budget. Pieces are whole cache lines, so that no two ranks ever
	// write one line and every element size divides them.
	piece := budget / (n * n * depth) / lineSize * lineSize
	piece = min(piece, maxChunk/n/lineSize*lineSize)
	piece = max(piece, lineSize) // past n = 16 at the minimum budget, the budget is exceeded
	l := layout{n: n, piece: piece, buf: n * piece, rankCtl: (lineText + textLines) * lineSize}
	l.dataOff = (n*l.rankCtl + 4095) &^ 4095
	l.size = l.dataOff + n*depth*l.buf
	return l
}

// RegionSize returns the bytes of the shared region for n local ranks whose
// data area is bounded by budget bytes (GOHCCL_BUFFSIZE; below MinBudget it
// is MinBudget). Messages larger than the data area stream through it. The
// data area is at most min(budget, n*depth*maxChunk); only past 16 local
// ranks at the minimum budget does the floor of one cache line per piece
// make it larger than budget.
func RegionSize(n, budget int) int {
	if n < 1 {
		return 0
	}
	return newLayout(n, budget).size
}

// ctl returns the offset of line i of rank r's control block.
func (l *layout) ctl(r, i int) int { return r*l.rankCtl + i*lineSize }

// data returns the offset of rank r's buffer b.
func (l *layout) data(r, b int) int { return l.dataOff + (r*depth+b)*l.buf }

// plainCopy is copy as a function value, the alternative to stream.
func plainCopy(dst, src []byte) { copy(dst, src) }
