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

// Endpoint is what a schedule needs from one rank's transport: a
// *transport.Mesh, or the simulator's virtual-time endpoint (goimpl/sim).
type Endpoint interface {
	Rank() int
	Size() int
	Send(peer int, h *transport.Header, payload []byte, deadline time.Time) error
	Post(r *transport.Recv)
	Wait(r *transport.Recv, deadline time.Time) error
}

// Op is one collective in progress on one rank: the mesh, the op's stamp
// and deadline, the communicator's scratch, and the reduce kernels.
//
// An Op may also be a group view (see View): the same endpoint, stamp,
// scratch and kernels, restricted to a subset of the ranks with its own rank
// numbering, so that a schedule written for a whole group runs unchanged on
// one level of a hierarchical algorithm.
type Op struct {
	Mesh Endpoint
	// Stamp carries the fingerprint and sequence number; Tag and Len are
	// filled per frame.
	Stamp    transport.Header
	Deadline time.Time
	// Scratch is the communicator's preallocated buffer: at least four
	// slots of Segment bytes (receive slots 0 and 1, accumulation slot 2;
	// the double tree receives into all four).
	Scratch []byte
	// Segment is the streaming unit in bytes, a multiple of 64 (so of every
	// element size).
	Segment int
	// Recvs are reusable receive descriptors, at least 2*Size+2 of them.
	Recvs []transport.Recv

	DType   reduce.DType
	Kernel  reduce.Kernel
	Kernel3 reduce.Kernel3

	// Node is the node's frameless collectives, for Level0Node; nil
	// where there are none.
	Node NodeCollectives

	// Work is the accumulation buffer of the schedules that keep partial
	// sums of more than a chunk while leaving their input untouched (the
	// recursive-halving and hierarchical reduce-scatters). They grow it to
	// what they need and leave it here, so an Op reused across operations
	// (a communicator's) allocates only when a larger message comes: the
	// trade is up to one message's size of memory held for the
	// communicator's life against an allocation per call. The simulator
	// sets it to a shared virtual buffer.
	Work []byte

	hdr transport.Header

	// at holds two lists of block indices for schedules that exchange
	// runs of blocks (the Bruck allgather), grown once to the group size.
	at [2][]int

	// group, in a view, holds the endpoint rank of each of the view's
	// ranks; nil means every rank of the endpoint, numbered as it numbers
	// them. grank is this rank's place in group.
	group []int
	grank int
	// phase is added to the phase of every frame's tag, so that the levels
	// of a composed algorithm carry distinct tags.
	phase int
	view  *Op // reused by View, so a composed op allocates nothing
}

// Rank returns this rank (its rank in the view, for a view).
func (o *Op) Rank() int {
	if o.group != nil {
		return o.grank
	}
	return o.Mesh.Rank()
}

// Size returns the group size (the view's, for a view).
func (o *Op) Size() int {
	if o.group != nil {
		return len(o.group)
	}
	return o.Mesh.Size()
}

// peer maps a rank of this op (of the view) to the endpoint's numbering.
func (o *Op) peer(p int) int {
	if o.group != nil {
		return o.group[p]
	}
	return p
}

// View returns this op restricted to members, the endpoint ranks of a
// subgroup in the order that numbers them 0..len(members)-1, with phase
// added to every frame's phase. It returns nil if this rank is not a
// member. The view shares the op's stamp, deadline, scratch, receive
// descriptors and kernels; it is valid until the next View call on the same
// op, and is used by one schedule at a time, like the op itself.
func (o *Op) View(members []int, phase int) *Op {
	me := o.Mesh.Rank()
	idx := -1
	for i, m := range members {
		if m == me {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil
	}
	v := o.view
	if v == nil {
		v = new(Op)
		o.view = v
	}
	keep := v.view
	*v = *o
	v.view = keep
	v.group, v.grank, v.phase = members, idx, o.phase+phase
	return v
}

func (o *Op) esize() int { return o.DType.Size() }

// work returns n bytes of o.Work, growing it first if it is shorter. A view
// must not call it (its grown buffer would not outlive it): composed
// schedules take their work at the top and pass it down.
func (o *Op) work(n int) []byte {
	if len(o.Work) < n {
		o.Work = make([]byte, n)
	}
	return o.Work[:n]
}

// indices returns the op's two index lists, n long each.
func (o *Op) indices(n int) (a, b []int) {
	if len(o.at[0]) < n {
		o.at = [2][]int{make([]int, n), make([]int, n)}
	}
	return o.at[0][:n], o.at[1][:n]
}

// slot returns scratch slot i (0 and 1 receive, 2 accumulates; the double
// tree's up phase receives into 0..3).
func (o *Op) slot(i int) []byte { return o.Scratch[i*o.Segment : (i+1)*o.Segment] }

// tag packs a frame's place in a schedule.
func tag(phase, step, segment int) uint64 { return transport.StepTag(phase, step, segment) }

func (o *Op) send(peer int, t uint64, payload []byte) error {
	// The header lives in the Op: a local would escape through the Link
	// interface and allocate on every frame.
	o.hdr = o.Stamp
	o.hdr.Tag = t + uint64(o.phase)<<56
	o.hdr.Len = uint32(len(payload))
	return o.Mesh.Send(o.peer(peer), &o.hdr, payload, o.Deadline)
}

// post posts receive descriptor i for the frame with tag t from peer.
func (o *Op) post(i, peer int, t uint64, buf []byte) *transport.Recv {
	r := &o.Recvs[i]
	r.Peer = o.peer(peer)
	r.Want = o.Stamp
	r.Want.Tag = t + uint64(o.phase)<<56
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
