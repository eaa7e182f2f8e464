package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// The single-copy all-reduce of two local ranks, for large messages. Each
// rank reads the peer's half of the message straight out of the peer's
// buffer with process_vm_readv (cross-memory attach, "CMA": the kernel
// copies between the two address spaces), reduces its own half in place,
// and then reads the peer's reduced half into its buffer the same way. A
// rank moves (n = 2, S bytes):
//
//	single copy: reads 2S, writes 1.5S; three waits per operation
//	one-shot:    reads 3S, writes 2S;   one wait per chunk
//
// The kernel's copy runs at about memcpy's rate while the data is in cache,
// so the saving is a third of the bytes; for small messages the system
// calls and the extra waits cost more than that, and for messages far
// beyond the caches the kernel's copy of pages out of cache is the slower
// one. goimpl/tune prices both from this host's measured figures and names
// the schedule in Call.Variant.
//
// Cross-memory attach needs the permission to ptrace the peer (same user,
// and no Yama or seccomp policy against it), which is not known until it is
// tried. The communicator tries it while it sets the engine up (Probe and
// CanReadPeer, the verdicts exchanged through its store) and tells the
// engine with SetSingleCopy; the single-copy variants fail on an engine
// that was not told it works.

// singleCopyScratch is the bytes of the peer's half read before they are
// reduced: small enough to stay in L2 between the read and the reduction.
const singleCopyScratch = 256 << 10

// The record a rank posts in its buffer for a single-copy operation: its
// pid and the address and length of its message.
const (
	scPid  = 0
	scAddr = 8
	scLen  = 16
)

// allReduceSingleCopy runs the single-copy schedule on buf.
func (e *Engine) allReduceSingleCopy(buf []byte) error {
	m, err := e.startSingleCopy(schedAllReduceSingleCopy, buf)
	if err != nil {
		return err
	}
	peer := 1 - e.me
	es := e.call.DType.Size()
	mlo, mhi := blockBytes(len(buf)/es, es, e.me)
	plo, phi := blockBytes(len(buf)/es, es, peer)
	// This rank's half: read the peer's piece by piece, reduce in place.
	scratch := e.scratchBuf()
	for off := mlo; off < mhi; off += len(scratch) {
		own := buf[off:min(off+len(scratch), mhi)]
		theirs := scratch[:len(own)]
		if err := e.readFrom(peer, m.pid, theirs, m.addr+uintptr(off)); err != nil {
			return err
		}
		if e.me == 0 {
			e.call.Kernel3(own, own, theirs)
		} else {
			e.call.Kernel3(own, theirs, own)
		}
	}
	e.ready[e.me].Store(2*m.k + 2)
	// The peer's half, reduced, straight into buf.
	if err := e.await(peer, 2*m.k+2, false, false); err != nil {
		return err
	}
	if err := e.readFrom(peer, m.pid, buf[plo:phi], m.addr+uintptr(plo)); err != nil {
		return err
	}
	return e.finishSingleCopy(m.k)
}

// allGatherSingleCopy is the allgather of two ranks over cross-memory
// attach: each rank reads the peer's in straight into its block of out.
// Per rank: reads S/2 (across), writes S/2, plus its own block's copy when
// in is not already there.
func (e *Engine) allGatherSingleCopy(in, out []byte) error {
	m, err := e.startSingleCopy(schedAllGatherSingleCopy, in)
	if err != nil {
		return err
	}
	peer, l := 1-e.me, len(in)
	if own := out[e.me*l : (e.me+1)*l]; &own[0] != &in[0] {
		copy(own, in)
	}
	if err := e.readFrom(peer, m.pid, out[peer*l:(peer+1)*l], m.addr); err != nil {
		return err
	}
	return e.finishSingleCopy(m.k)
}

// broadcastSingleCopy is the broadcast of two ranks over cross-memory
// attach: the other rank reads root's buf straight into its own. Per rank:
// the reader reads and writes S (across), the root nothing.
func (e *Engine) broadcastSingleCopy(buf []byte, root int) error {
	m, err := e.startSingleCopy(schedBroadcastSingleCopy, buf)
	if err != nil {
		return err
	}
	if e.me != root {
		if err := e.readFrom(root, m.pid, buf, m.addr); err != nil {
			return err
		}
	}
	return e.finishSingleCopy(m.k)
}

// peerMessage is what a single-copy operation's address exchange took:
// its chunk k in buffer b, and the peer's process id and message address.
type peerMessage struct {
	k    uint64
	b    int
	pid  int
	addr uintptr
}

// startSingleCopy begins an operation of single-copy schedule s on buf, the
// message whose address the ranks exchange.
func (e *Engine) startSingleCopy(s schedule, buf []byte) (m peerMessage, err error) {
	switch {
	case e.n != 2:
		return m, fmt.Errorf("mesh: %s: the single-copy schedules run on two local ranks, not %d", describeOp(&e.call.Stamp), e.n)
	case !e.cma:
		return m, fmt.Errorf("mesh: %s: single copy asked for, but cross-memory attach was not found to work between the local ranks", describeOp(&e.call.Stamp))
	}
	e.chunks = 1
	m.k, m.b = e.step(0)
	m.pid, m.addr, err = e.exchangeAddress(s, m.k, m.b, buf)
	return m, err
}

// finishSingleCopy releases chunk k and waits for the peer's release: the
// peer reads this rank's buffer until then, and the buffer may change once
// the operation returns.
func (e *Engine) finishSingleCopy(k uint64) error {
	peer := 1 - e.me
	e.release(k)
	if err := e.wait(e.free, peer, k+1, "the peer's read of this rank's buffer", false); err != nil {
		return err
	}
	e.seenFree[peer] = k + 1
	e.k++
	return nil
}

// SetSingleCopy tells the engine whether its two ranks may read each
// other's memory (the SingleCopy variants). Every local rank must be told
// the same; call it before the first operation.
func (e *Engine) SetSingleCopy(works bool) { e.cma = works }

// SingleCopy reports what SetSingleCopy said.
func (e *Engine) SingleCopy() bool { return e.cma }

// probe is what Probe publishes and CanReadPeer reads back: a value only
// this process holds, at an address of this process.
var probe = func() *[2]uint64 {
	p := new([2]uint64)
	p[0] = uint64(os.Getpid())<<32 ^ uint64(time.Now().UnixNano())
	p[1] = ^p[0]
	return p
}()

// Probe returns what a peer needs to test cross-memory attach to this
// process: its pid, an address in it and the 16 bytes found there.
func Probe() (pid int, addr uintptr, want [16]byte) {
	binary.LittleEndian.PutUint64(want[:], probe[0])
	binary.LittleEndian.PutUint64(want[8:], probe[1])
	return os.Getpid(), uintptr(unsafe.Pointer(probe)), want
}

// CanReadPeer reports whether this process may read process pid's memory:
// the 16 bytes at addr (from the peer's Probe) read back as want.
func CanReadPeer(pid int, addr uintptr, want [16]byte) bool {
	var got [16]byte
	return processVMRead(pid, got[:], addr) == nil && got == want
}

// exchangeAddress posts, for chunk k of schedule s in buffer b, this
// process's id and buf's address and length, and returns the peer's once it
// has posted theirs. Lengths that differ are a mismatch.
func (e *Engine) exchangeAddress(s schedule, k uint64, b int, buf []byte) (pid int, addr uintptr, err error) {
	peer := 1 - e.me
	if err := e.claim(k); err != nil {
		return 0, 0, err
	}
	e.open(s, k)
	rec := e.slot(e.me, b)
	binary.LittleEndian.PutUint64(rec[scPid:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(rec[scAddr:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))
	binary.LittleEndian.PutUint64(rec[scLen:], uint64(len(buf)))
	e.post(2*k + 1)
	if err := e.await(peer, 2*k+1, true, false); err != nil {
		return 0, 0, err
	}
	prec := e.slot(peer, b)
	if n := binary.LittleEndian.Uint64(prec[scLen:]); n != uint64(len(buf)) {
		return 0, 0, fmt.Errorf("%w: %s: %s's message is %d bytes, this rank's %d",
			transport.ErrMismatch, describeOp(&e.call.Stamp), e.who(peer), n, len(buf))
	}
	return int(binary.LittleEndian.Uint64(prec[scPid:])), uintptr(binary.LittleEndian.Uint64(prec[scAddr:])), nil
}

// readFrom fills dst from the peer's memory at addr.
func (e *Engine) readFrom(peer, pid int, dst []byte, addr uintptr) error {
	if err := e.readPeer(pid, dst, addr); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			// The peer's process is gone (killed, or exited in the
			// collective): the peer is lost, known here before any wait
			// of this rank's would learn it.
			err = fmt.Errorf("%w: %w", transport.ErrPeerLost, err)
		}
		return fmt.Errorf("%s: reading %d bytes of %s's buffer (process %d): %w",
			describeOp(&e.call.Stamp), len(dst), e.who(peer), pid, err)
	}
	return nil
}

// scratchBuf returns the engine's buffer for the peer's bytes, allocated at
// its first single-copy operation.
func (e *Engine) scratchBuf() []byte {
	if e.scratch == nil {
		e.scratch = make([]byte, singleCopyScratch)
	}
	return e.scratch
}

// blockBytes returns the byte range of rank r's half of count es-byte
// elements.
func blockBytes(count, es, r int) (lo, hi int) {
	off, l := pattern.Blocks(count, 2, r)
	return off * es, (off + l) * es
}
