package stage

import (
	"fmt"
	"time"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// The staged operations mirror comm's host collectives of the same names,
// with device addresses for buffers and a Place. Each validates its
// arguments (a bad one is refused with comm.ErrInvalid before anything is
// copied or sent), then runs the one pipeline. All ranks must stage a call
// alike: a device buffer on one rank against a host buffer on another
// mismatches (the chunks' host collectives differ from the whole one).

// AllReduce reduces count elements at buf across all ranks, in place.
func (s *Stager) AllReduce(at Place, buf device.Ptr, count int, dt reduce.DType, op reduce.Op, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, allReduce, buf, buf, count, dt, timeout); err != nil {
		return err
	}
	if err := checkOp(dt, op); err != nil {
		return err
	}
	s.call.op = op
	return s.run(at)
}

// Broadcast copies root's count elements at buf to every rank's buf.
func (s *Stager) Broadcast(at Place, buf device.Ptr, count int, dt reduce.DType, root int, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, broadcast, buf, buf, count, dt, timeout); err != nil {
		return err
	}
	if err := s.setRoot(root); err != nil {
		return err
	}
	return s.run(at)
}

// Reduce reduces count elements at buf onto root's buf; other ranks' buffers
// are not modified.
func (s *Stager) Reduce(at Place, buf device.Ptr, count int, dt reduce.DType, op reduce.Op, root int, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, reduceOp, buf, buf, count, dt, timeout); err != nil {
		return err
	}
	if err := checkOp(dt, op); err != nil {
		return err
	}
	if err := s.setRoot(root); err != nil {
		return err
	}
	s.call.op = op
	return s.run(at)
}

// AllGather gathers count elements at in from each rank into out (Size
// blocks of count, rank p's at p*count).
func (s *Stager) AllGather(at Place, in, out device.Ptr, count int, dt reduce.DType, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, allGather, in, out, count, dt, timeout); err != nil {
		return err
	}
	return s.run(at)
}

// ReduceScatter reduces in (Size blocks of count elements) and leaves block
// Rank's result in out.
func (s *Stager) ReduceScatter(at Place, in, out device.Ptr, count int, dt reduce.DType, op reduce.Op, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, reduceScatter, in, out, count, dt, timeout); err != nil {
		return err
	}
	if err := checkOp(dt, op); err != nil {
		return err
	}
	s.call.op = op
	return s.run(at)
}

// Gather collects count elements at in from every rank into root's out
// (Size blocks of count; not used elsewhere, and may be 0 there).
func (s *Stager) Gather(at Place, in, out device.Ptr, count int, dt reduce.DType, root int, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, gather, in, out, count, dt, timeout); err != nil {
		return err
	}
	if err := s.setRoot(root); err != nil {
		return err
	}
	return s.run(at)
}

// Scatter sends block p of root's in (Size blocks of count elements; not
// used elsewhere) to rank p's out.
func (s *Stager) Scatter(at Place, in, out device.Ptr, count int, dt reduce.DType, root int, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, scatter, in, out, count, dt, timeout); err != nil {
		return err
	}
	if err := s.setRoot(root); err != nil {
		return err
	}
	return s.run(at)
}

// AllToAllV sends sendCounts[p] elements at sendOffsets[p] of in to rank p
// and receives recvCounts[p] elements from p at recvOffsets[p] of out
// (elements). The slices are read during the call only.
func (s *Stager) AllToAllV(at Place, in device.Ptr, sendCounts, sendOffsets []int, out device.Ptr,
	recvCounts, recvOffsets []int, dt reduce.DType, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, allToAll, in, out, 0, dt, timeout); err != nil {
		return err
	}
	n := s.c.Size()
	for _, side := range [...]struct {
		name            string
		buf             device.Ptr
		counts, offsets []int
	}{{"send", in, sendCounts, sendOffsets}, {"receive", out, recvCounts, recvOffsets}} {
		if len(side.counts) != n || len(side.offsets) != n {
			return fmt.Errorf("%w: staged alltoall needs %d %s counts and offsets, got %d and %d", comm.ErrInvalid, n, side.name, len(side.counts), len(side.offsets))
		}
		for p := range side.counts {
			if side.counts[p] < 0 || side.offsets[p] < 0 {
				return fmt.Errorf("%w: staged alltoall %s block for rank %d has count %d at offset %d", comm.ErrInvalid, side.name, p, side.counts[p], side.offsets[p])
			}
			if side.counts[p] > 0 && side.buf == 0 {
				return fmt.Errorf("%w: staged alltoall has a NULL %s buffer for %d elements of rank %d", comm.ErrInvalid, side.name, side.counts[p], p)
			}
		}
	}
	if r := s.c.Rank(); sendCounts[r] != recvCounts[r] {
		return fmt.Errorf("%w: alltoall sends %d elements to this rank itself but expects %d", comm.ErrInvalid, sendCounts[r], recvCounts[r])
	}
	cl := &s.call
	cl.sendCounts, cl.sendOffsets, cl.recvCounts, cl.recvOffsets = sendCounts, sendOffsets, recvCounts, recvOffsets
	defer func() { cl.sendCounts, cl.sendOffsets, cl.recvCounts, cl.recvOffsets = nil, nil, nil, nil }()
	return s.run(at)
}

// Barrier returns once every rank has entered it and the work queued on
// this rank's stream before the call has finished.
func (s *Stager) Barrier(at Place, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, barrier, 0, 0, 0, reduce.Uint8, timeout); err != nil {
		return err
	}
	return s.run(at)
}

// Send sends count elements at buf to peer with tag.
func (s *Stager) Send(at Place, peer int, tag int64, buf device.Ptr, count int, dt reduce.DType, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, send, buf, buf, count, dt, timeout); err != nil {
		return err
	}
	if err := s.setPeer("send destination", peer, false); err != nil {
		return err
	}
	s.call.tag = tag
	return s.run(at)
}

// Recv receives count elements from peer (or transport.AnySource) with tag
// into buf and returns the sender's rank. It holds the Stager until the
// message has arrived, so the C ABI gives a communicator's receives a
// Stager of their own, apart from its sends and collectives
// (capi/device.go, stagerFor): otherwise two ranks exchanging messages
// deadlock.
func (s *Stager) Recv(at Place, peer int, tag int64, buf device.Ptr, count int, dt reduce.DType, timeout time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.begin(at, recv, buf, buf, count, dt, timeout); err != nil {
		return peer, err
	}
	if err := s.setPeer("receive source", peer, true); err != nil {
		return peer, err
	}
	s.call.tag = tag
	err := s.run(at)
	return s.call.peer, err
}

// begin checks what every staged call shares and fills s.call. For
// alltoall (count 0 here) the buffers are checked by AllToAllV.
func (s *Stager) begin(at Place, k kind, in, out device.Ptr, count int, dt reduce.DType, timeout time.Duration) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: unknown dtype %d", comm.ErrInvalid, uint8(dt))
	}
	if count < 0 {
		return fmt.Errorf("%w: staged %s count %d is negative", comm.ErrInvalid, k, count)
	}
	if at.Device < 0 {
		return fmt.Errorf("%w: device index %d is negative", comm.ErrInvalid, at.Device)
	}
	s.call = call{kind: k, in: in, out: out, count: count, dt: dt, es: dt.Size(), root: -1, peer: -1,
		deadline: s.c.Deadline(timeout)}
	return nil
}

// setRoot checks and sets a rooted call's root, then its buffers: the ones
// only root (or only the leaves) use may be 0 elsewhere.
func (s *Stager) setRoot(root int) error {
	if root < 0 || root >= s.c.Size() {
		return fmt.Errorf("%w: root %d is outside the group of %d ranks", comm.ErrInvalid, root, s.c.Size())
	}
	s.call.root = root
	return nil
}

func (s *Stager) setPeer(what string, peer int, allowAny bool) error {
	if !(allowAny && peer == transport.AnySource) && (peer < 0 || peer >= s.c.Size()) {
		return fmt.Errorf("%w: %s rank %d is outside the group of %d ranks", comm.ErrInvalid, what, peer, s.c.Size())
	}
	s.call.peer = peer
	return nil
}

func checkOp(dt reduce.DType, op reduce.Op) error {
	if err := reduce.Check(dt, op); err != nil {
		return fmt.Errorf("%w: %v", comm.ErrInvalid, err)
	}
	return nil
}

// run checks the buffers this rank copies, cuts the call into chunks and
// stages it.
func (s *Stager) run(at Place) error {
	cl := &s.call
	if cl.kind != allToAll && cl.count > 0 {
		down, up := cl.copies(s.c.Rank())
		if (down && cl.in == 0) || (up && cl.out == 0) {
			return fmt.Errorf("%w: staged %s of %d %s elements has a NULL device buffer", comm.ErrInvalid, cl.kind, cl.count, cl.dt)
		}
	}
	var err error
	if cl.kind == allToAll {
		// cutAllToAll runs a host collective, so it needs the
		// communicator to be whole; stage checks the rest.
		if err = s.c.Err(); err != nil {
			return fmt.Errorf("%w: %v", comm.ErrBroken, err)
		}
		err = s.cutAllToAll()
	} else {
		err = s.cut()
	}
	if err != nil {
		return err
	}
	return s.stage(at)
}
