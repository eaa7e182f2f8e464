// Package algo holds the collective schedules: one file per algorithm per
// collective, each a pure schedule of sends and posted receives over a
// transport.Mesh. A schedule never learns what carries the bytes.
//
// Terms used throughout:
//   - chunk: the part of a buffer one rank owns in a ring or tree
//     (pattern.Blocks of the element count);
//   - segment: the unit a chunk is streamed in, at most Op.Segment bytes, so
//     that a receive lands in a scratch slot that fits the cache and the
//     reduce of one segment overlaps the transfer of the next;
//   - step: one round of a schedule (ring step, tree level).
//
// Every frame's tag encodes (phase, step, segment), so each frame a rank
// receives is checked against the exact one it expects.
package algo

import (
	"time"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// DirectFrame bounds one frame of a transfer that goes straight between user
// buffers (gather, scatter, all-to-all, send/recv). Large enough that the
// per-frame cost vanishes, small enough to stay far below MaxPayload.
const DirectFrame = 64 << 20

// Op is one collective in progress on one rank: the mesh, the op's stamp
// and deadline, the communicator's scratch, and the reduce kernels.
type Op struct {
	Mesh *transport.Mesh
	// Stamp carries the fingerprint and sequence number; Tag and Len are
	// filled per frame.
	Stamp    transport.Header
	Deadline time.Time
	// Scratch is the communicator's preallocated buffer: two receive slots
	// and one accumulation slot of Segment bytes each.
	Scratch []byte
	// Segment is the streaming unit in bytes, a multiple of 64 (so of every
	// element size).
	Segment int
	// Recvs are reusable receive descriptors, at least 2*Size+2 of them.
	Recvs []transport.Recv

	DType   reduce.DType
	Kernel  reduce.Kernel
	Kernel3 reduce.Kernel3

	hdr transport.Header
}

// Rank returns this rank.
func (o *Op) Rank() int { return o.Mesh.Rank() }

// Size returns the group size.
func (o *Op) Size() int { return o.Mesh.Size() }

func (o *Op) esize() int { return o.DType.Size() }

// slot returns scratch slot i (0 and 1 receive, 2 accumulates).
func (o *Op) slot(i int) []byte { return o.Scratch[i*o.Segment : (i+1)*o.Segment] }

// tag packs a frame's place in a schedule.
func tag(phase, step, segment int) uint64 { return transport.StepTag(phase, step, segment) }

func (o *Op) send(peer int, t uint64, payload []byte) error {
	// The header lives in the Op: a local would escape through the Link
	// interface and allocate on every frame.
	o.hdr = o.Stamp
	o.hdr.Tag = t
	o.hdr.Len = uint32(len(payload))
	return o.Mesh.Send(peer, &o.hdr, payload, o.Deadline)
}

// post posts receive descriptor i for the frame with tag t from peer.
func (o *Op) post(i, peer int, t uint64, buf []byte) *transport.Recv {
	r := &o.Recvs[i]
	r.Peer = peer
	r.Want = o.Stamp
	r.Want.Tag = t
	r.Want.Len = uint32(len(buf))
	r.Buf = buf
	o.Mesh.Post(r)
	return r
}

func (o *Op) wait(r *transport.Recv) error { return o.Mesh.Wait(r, o.Deadline) }

// segments returns how many segments of seg bytes cover n bytes.
func segments(n, seg int) int { return (n + seg - 1) / seg }

// part returns segment j of b.
func part(b []byte, seg, j int) []byte {
	lo := j * seg
	return b[lo:min(lo+seg, len(b))]
}

// framesOf returns how many DirectFrame frames carry n bytes: at least one,
// so that even an empty transfer is checked against what the peer expects.
func framesOf(n int) int { return max(1, segments(n, DirectFrame)) }

// sendDirect sends b to peer in DirectFrame frames tagged (phase, step, f).
func (o *Op) sendDirect(peer, phase, step int, b []byte) error {
	for f := 0; f < framesOf(len(b)); f++ {
		if err := o.send(peer, tag(phase, step, f), part(b, DirectFrame, f)); err != nil {
			return err
		}
	}
	return nil
}

// recvDirect receives b from peer, frame by frame, into b itself.
func (o *Op) recvDirect(i, peer, phase, step int, b []byte) error {
	for f := 0; f < framesOf(len(b)); f++ {
		if err := o.wait(o.post(i, peer, tag(phase, step, f), part(b, DirectFrame, f))); err != nil {
			return err
		}
	}
	return nil
}

// exchange sends send to sendPeer and receives len(recv) bytes from recvPeer
// in segments, with the receive of segment j+1 posted before segment j is
// sent. With acc nil, segments land in recv directly. With acc set, each
// segment lands in a scratch slot and is reduced: acc = recv op slot,
// segment by segment (acc may be recv itself).
func (o *Op) exchange(phase, step, sendPeer int, send []byte, recvPeer int, recv, acc []byte) error {
	seg := o.Segment
	nsend, nrecv := segments(len(send), seg), segments(len(recv), seg)
	dst := func(j int) []byte {
		if acc == nil {
			return part(recv, seg, j)
		}
		return o.slot(j % 2)[:len(part(recv, seg, j))]
	}
	var pending [2]*transport.Recv
	if nrecv > 0 {
		pending[0] = o.post(0, recvPeer, tag(phase, step, 0), dst(0))
	}
	for j := 0; j < max(nsend, nrecv); j++ {
		if j+1 < nrecv {
			pending[(j+1)%2] = o.post((j+1)%2, recvPeer, tag(phase, step, j+1), dst(j+1))
		}
		if j < nsend {
			if err := o.send(sendPeer, tag(phase, step, j), part(send, seg, j)); err != nil {
				return err
			}
		}
		if j < nrecv {
			if err := o.wait(pending[j%2]); err != nil {
				return err
			}
			if acc != nil {
				o.Kernel3(part(acc, seg, j), part(recv, seg, j), pending[j%2].Buf)
			}
		}
	}
	return nil
}
