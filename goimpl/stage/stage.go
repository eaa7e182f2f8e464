// Package stage runs a communicator's operations on accelerator memory. The
// host collectives of goimpl/comm move the bytes between ranks; a device
// buffer reaches them through pinned host memory, in chunks, so that the
// copies overlap the collective instead of adding to it.
//
// Terms. A staged call cuts its message into chunks; chunk k covers the
// elements [lo, lo+n) of every block of the call (a block is one rank's
// share: allgather's output has Size blocks of count elements). Each chunk
// lives in one of three slots of the communicator's pinned buffer while it
// is copied down (device to host), reduced or exchanged by the host
// collective, and copied up (host to device). A span is one byte range of a
// copy: a device address, an offset in the slot and a length. The chunks of
// every collective differ only in their spans and their host call; one
// pipeline runs them all:
//
//	sync stream               chunk k is down; chunk k-2 is up, its slot free
//	queue down(k+1)           into slot k+1
//	queue up(k-1)             from slot k-1
//	host collective on k      meanwhile the stream runs both copies
//
// so a call of K chunks costs about one chunk's copies plus K times the
// larger of a chunk's collective and its copies, not their sum. The copies
// of one call run on the caller's stream in issue order, behind the work
// queued there before the call; the call returns once its results are in
// device memory (docs/devices.md).
//
// Chunk sizes depend only on GOHCCL_BUFFSIZE, the group size and the call's
// counts, never on timing, so that every rank cuts a call alike and the
// host collectives of chunk k match across ranks.
package stage

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// Tunables of the chunking.
const (
	// slots is the depth of the pipeline: one chunk being copied down, one
	// in the host collective, one being copied up.
	slots = 3
	// targetChunks is how many chunks a large message is cut into at
	// least: the first chunk's copy down and the last one's copy up overlap
	// nothing, so fewer chunks leave more of the copies exposed, while more
	// chunks pay a host collective's latency and a stream synchronization
	// more often.
	targetChunks = 8
	// minChunk is the smallest chunk (in slot bytes) a message is cut into:
	// below about a megabyte a copy's and a collective's fixed costs (a
	// launch and a synchronization are several microseconds each) outweigh
	// what overlapping them gains.
	minChunk = 1 << 20
	// align is the alignment of every area in a slot: Ascend's
	// aclrtMemcpyAsync wants 64-byte aligned addresses (CANN 8.0), and
	// DMA engines copy aligned lines fastest.
	align = 64
)

// Place is where a staged call's buffers live: a device of the Stager's
// runtime and the stream its copies are queued on.
type Place struct {
	Device int
	Stream device.Stream
}

// Stager stages one communicator's operations through one runtime's
// devices. Its pinned buffer (GOHCCL_BUFFSIZE bytes, cut into three slots)
// is allocated by the runtime at the first call and freed by Close. Staged
// operations of one Stager run one at a time: they share the slots.
type Stager struct {
	c        *comm.Comm
	rt       device.Runtime
	buffSize int

	mu        sync.Mutex
	pinned    []byte // the runtime's allocation; nil before the first call
	pinnedDev int    // the device it was allocated on
	slot      [slots][]byte
	chunk     [slots]chunk
	call      call
	agree     [8]byte // host buffer for alltoallv's agreement on the chunk count
	closed    bool
}

// New returns the Stager of communicator c over runtime rt. Nothing is
// allocated until the first staged call.
func New(c *comm.Comm, rt device.Runtime) *Stager {
	return &Stager{c: c, rt: rt, buffSize: int(c.Config().BuffSize)}
}

// Runtime returns the runtime the Stager copies with.
func (s *Stager) Runtime() device.Runtime { return s.rt }

// Close frees the pinned buffer; later calls fail. It waits for a call in
// progress, which fails at its next host collective once the communicator
// is closed or aborted.
func (s *Stager) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.pinned == nil {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The pinned memory belongs to the runtime's context of the device it
	// was allocated on; free it from there.
	prev, err := s.rt.SetDevice(s.pinnedDev)
	if err == nil {
		err = s.rt.FreeHost(s.pinned)
		if prev >= 0 && prev != s.pinnedDev {
			_, _ = s.rt.SetDevice(prev)
		}
	}
	s.pinned = nil
	s.slot = [slots][]byte{}
	if err != nil {
		return fmt.Errorf("freeing the %s pinned buffer of rank %d: %w", s.rt.Name(), s.c.Rank(), err)
	}
	return nil
}

// allocate makes the slots at the first call, on the calling thread's
// current device (the call's).
func (s *Stager) allocate(dev int) error {
	if s.pinned != nil {
		return nil
	}
	size := (s.buffSize / slots) &^ (align - 1)
	b, err := s.rt.AllocHost(slots * size)
	if err != nil {
		return err
	}
	s.pinned, s.pinnedDev = b, dev
	for i := range s.slot {
		s.slot[i] = b[i*size : (i+1)*size : (i+1)*size]
	}
	n := s.c.Size()
	for i := range s.chunk {
		ch := &s.chunk[i]
		ch.down = make([]span, 0, n)
		ch.up = make([]span, 0, n)
		ch.sendCounts, ch.sendOffsets = make([]int, n), make([]int, n)
		ch.recvCounts, ch.recvOffsets = make([]int, n), make([]int, n)
	}
	return nil
}

// slotBytes is the size of one slot: GOHCCL_BUFFSIZE split three ways.
func (s *Stager) slotBytes() int { return (s.buffSize / slots) &^ (align - 1) }

// stage runs the call in s.call at place at. The caller holds s.mu and has
// validated the call.
func (s *Stager) stage(at Place) error {
	cl := &s.call
	if s.closed {
		return fmt.Errorf("%w: staged %s on a destroyed communicator", transport.ErrClosed, cl.kind)
	}
	if err := s.c.Err(); err != nil {
		return fmt.Errorf("%w: %v", comm.ErrBroken, err)
	}
	cl.at = -1             // not in the pipeline yet
	runtime.LockOSThread() // the runtime's current device is per thread
	defer runtime.UnlockOSThread()
	prev, err := s.rt.SetDevice(at.Device)
	if err == nil {
		err = s.allocate(at.Device)
	}
	if err == nil {
		err = s.pipeline(at.Stream)
	}
	if prev >= 0 && prev != at.Device {
		if rerr := func() error { _, e := s.rt.SetDevice(prev); return e }(); rerr != nil && err == nil {
			err = fmt.Errorf("putting the calling thread back on device %d: %w", prev, rerr)
		}
	}
	if err == nil {
		return nil
	}
	where := ""
	if cl.at >= 0 {
		where = fmt.Sprintf(", chunk %d of %d", cl.at+1, cl.chunks)
	}
	err = fmt.Errorf("%s-staged %s of %d %s elements on device %d, rank %d%s: %w",
		s.rt.Name(), cl.kind, cl.count, cl.dt, at.Device, s.c.Rank(), where, err)
	if errors.Is(err, device.ErrRuntime) {
		// The peers may be waiting in this call's host collectives: tell
		// them why this rank stopped, and refuse what follows.
		s.c.Fail(err)
	}
	return err
}

// pipeline runs the chunks of s.call (see the package comment). On any
// failure it waits for the copies it queued before it returns, so that no
// copy writes into a slot or a caller's buffer afterwards.
func (s *Stager) pipeline(st device.Stream) (err error) {
	cl := &s.call
	defer func() {
		if err != nil {
			_ = s.rt.Synchronize(st) // drain; the first error is the one to report
		}
	}()
	cl.at = 0
	s.layout(0, &s.chunk[0])
	if err = s.copyDown(&s.chunk[0], s.slot[0], st); err != nil {
		return err
	}
	for k := 0; k < cl.chunks; k++ {
		cl.at = k
		if err = s.rt.Synchronize(st); err != nil {
			return err
		}
		if k+1 < cl.chunks {
			next := &s.chunk[(k+1)%slots]
			s.layout(k+1, next)
			if err = s.copyDown(next, s.slot[(k+1)%slots], st); err != nil {
				return err
			}
		}
		if k >= 1 {
			if err = s.copyUp(&s.chunk[(k-1)%slots], s.slot[(k-1)%slots], st); err != nil {
				return err
			}
		}
		if err = s.host(k, &s.chunk[k%slots], s.slot[k%slots]); err != nil {
			return err
		}
	}
	last := (cl.chunks - 1) % slots
	if err = s.copyUp(&s.chunk[last], s.slot[last], st); err != nil {
		return err
	}
	return s.rt.Synchronize(st)
}

func (s *Stager) copyDown(ch *chunk, slot []byte, st device.Stream) error {
	for _, sp := range ch.down {
		if err := s.rt.CopyToHost(slot[sp.host:sp.host+sp.n], sp.dev, st); err != nil {
			return err
		}
	}
	return nil
}

func (s *Stager) copyUp(ch *chunk, slot []byte, st device.Stream) error {
	for _, sp := range ch.up {
		if err := s.rt.CopyToDevice(sp.dev, slot[sp.host:sp.host+sp.n], st); err != nil {
			return err
		}
	}
	return nil
}

// remaining is the time left to the call's deadline for its next host
// collective. A passed deadline still gets a positive timeout (comm takes
// zero for its default), so the collective fails as timed out.
func (s *Stager) remaining() time.Duration {
	return max(time.Until(s.call.deadline), time.Nanosecond)
}

// alignUp rounds n up to the slot alignment.
func alignUp(n int) int { return (n + align - 1) &^ (align - 1) }
