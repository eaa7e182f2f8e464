package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	shmem "github.com/gohccl/gohccl/goimpl/shm"
)

// Region layout. Every offset is a multiple of a cache line, so that no two
// words written by different ranks share one:
//
//	line 0               region header: the layout word
//	lines 1..n           one process slot per local rank (pid, for liveness)
//	then n*(n-1) rings   one per directed pair (from, to), from != to
//
// and each ring is
//
//	line 0   head: bytes the receiver has consumed (written by the receiver)
//	line 1   tail: bytes the sender has published (written by the sender)
//	line 2   flags: which side closed the ring
//	then     the data area, ringCap bytes, used as a circular byte stream
//
// head and tail only grow; position p of the stream lives at data[p%cap].
// The sender owns [head, head+cap) minus [head, tail); the receiver owns
// [head, tail).
const (
	line = shmem.CounterSize
	// ringCtl is the control part of a ring: head, tail and flags lines.
	ringCtl = 3 * line
	// minRing and maxRing bound a ring's data area. A ring smaller than a
	// few pieces of a frame makes every large frame a lock-step exchange;
	// one larger than 1 GiB holds more than the largest frame.
	minRing = 1 << 10
	maxRing = 1 << 30
	// maxLocal bounds the local ranks of one region (the layout word gives
	// them 16 bits).
	maxLocal = 1<<16 - 1
	pageSize = 4096
)

// layoutMagic tags the layout word, so that a region written by something
// else, or laid out for other arguments, is refused at Attach.
const layoutMagic = 0x6873 // "sh"

// ringCap is the data area of one ring for a requested ringBytes: at least
// minRing, at most maxRing, a whole number of cache lines.
func ringCap(ringBytes int) int {
	c := min(max(ringBytes, minRing), maxRing)
	return (c + line - 1) &^ (line - 1)
}

// RegionSize returns the bytes of shared memory the links among n local
// ranks need, each directed pair getting a ring of ringBytes (raised to at
// least 1 KiB, capped at 1 GiB, rounded up to a cache line). The total is a
// whole number of pages.
func RegionSize(n, ringBytes int) int {
	n = max(n, 1)
	size := line*(1+n) + n*(n-1)*(ringCtl+ringCap(ringBytes))
	return (size + pageSize - 1) &^ (pageSize - 1)
}

// layoutWord encodes the arguments every rank of a region must agree on.
func layoutWord(n, capBytes int) uint64 {
	return layoutMagic<<48 | uint64(n)<<32 | uint64(capBytes/line)
}

func ringsOffset(n int) int { return line * (1 + n) }

// ringIndex numbers the directed pairs: each sender's n-1 rings in turn.
func ringIndex(from, to, n int) int {
	i := from*(n-1) + to
	if to > from {
		i--
	}
	return i
}

// regionHeader is line 0 of a region.
type regionHeader struct {
	layout atomic.Uint64
	_      [line - 8]byte
}

// procSlot is one local rank's line: who it is, so that peers can tell
// when it died without closing its links. pid is written last; zero means
// not attached yet, or not known (then peers rely on deadlines alone).
type procSlot struct {
	pid   atomic.Uint64
	pidNS atomic.Uint64 // inode of its pid namespace: pids compare only within one
	start atomic.Uint64 // start time in clock ticks since boot, against pid reuse
	_     [line - 24]byte
}

// Ring flags.
const (
	senderClosed   = 1 << 0
	receiverClosed = 1 << 1
)

// ringFlags is line 2 of a ring.
type ringFlags struct {
	closed atomic.Uint32
	_      [line - 4]byte
}

// at returns a *T over region[off:]; off must leave room for T and the
// region must be 8-byte aligned (Attach checks it).
func at[T any](region []byte, off int) *T {
	var zero T
	_ = region[off+int(unsafe.Sizeof(zero))-1]
	return (*T)(unsafe.Pointer(&region[off]))
}

// ring is one direction of one pair, as either end sees it.
type ring struct {
	head, tail *shmem.Counter
	flags      *ringFlags
	data       []byte
	cap        uint64
	// piece is the unit a frame streams in: the sender publishes its tail,
	// and the receiver its head, at least once per piece. Smaller pieces
	// overlap the two copies better on large frames; each costs a store
	// to a line the other side reads (a cache-line transfer).
	piece uint64
}

// maxPiece keeps a piece within a core's L2 share, so that the receiver
// copies it out while it is still in a cache.
const maxPiece = 64 << 10

func ringAt(region []byte, n, from, to, capBytes int) ring {
	off := ringsOffset(n) + ringIndex(from, to, n)*(ringCtl+capBytes)
	return ring{
		head:  shmem.CounterAt(region, off),
		tail:  shmem.CounterAt(region, off+line),
		flags: at[ringFlags](region, off+2*line),
		data:  region[off+ringCtl : off+ringCtl+capBytes : off+ringCtl+capBytes],
		cap:   uint64(capBytes),
		piece: uint64(min(capBytes/4, maxPiece)),
	}
}

// put copies src into the stream at position pos, wrapping at the end of
// the data area.
func (r *ring) put(pos uint64, src []byte) {
	off := pos % r.cap
	n := copy(r.data[off:], src)
	copy(r.data, src[n:])
}

// get copies the stream at position pos into dst.
func (r *ring) get(pos uint64, dst []byte) {
	off := pos % r.cap
	n := copy(dst, r.data[off:])
	copy(dst[n:], r.data)
}

// close marks the ring closed by one side and wakes whoever sleeps on it,
// on either side.
func (r *ring) close(side uint32) {
	r.flags.closed.Or(side)
	r.head.Wake()
	r.tail.Wake()
}

func (r *ring) closedBy(side uint32) bool { return r.flags.closed.Load()&side != 0 }

// checkLayout records the layout in a fresh region, or checks that the
// region was laid out with the same arguments by the ranks before.
func checkLayout(region []byte, n, capBytes int) error {
	hdr := at[regionHeader](region, 0)
	want := layoutWord(n, capBytes)
	if hdr.layout.CompareAndSwap(0, want) {
		return nil
	}
	if got := hdr.layout.Load(); got != want {
		if got>>48 != layoutMagic {
			return fmt.Errorf("shared-memory region does not hold gohccl rings (layout word %#x)", got)
		}
		return fmt.Errorf("shared-memory region is laid out for %d local ranks with %d-byte rings, this rank expects %d with %d-byte rings",
			got>>32&0xffff, (got&0xffffffff)*line, n, capBytes)
	}
	return nil
}
