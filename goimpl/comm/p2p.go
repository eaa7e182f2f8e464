package comm

import (
	"fmt"
	"sync"
	"time"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/flight"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// p2pState pools receive requests so steady point-to-point traffic does not
// allocate.
type p2pState struct {
	pool sync.Pool
}

func (p *p2pState) init() {
	p.pool.New = func() any { return new(RecvRequest) }
}

// RecvRequest is a posted point-to-point receive. A message travels in
// frames of at most algo.DirectFrame bytes, each with the message's tag and
// total count; all frames are posted at once, so matching follows issue
// order. An any-source receive posts its first frame only, and the rest from
// the rank that first frame came from.
type RecvRequest struct {
	frames []transport.Recv
	buf    []byte
	peer   int
	want   transport.Header
	any    bool
	rec    uint64 // its flight record
}

func p2pHeader(tag int64, count int, dt reduce.DType) transport.Header {
	return transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindSend, DType: dt, Count: uint64(count)}, Tag: uint64(tag)}
}

func framesFor(n int) int { return max(1, (n+algo.DirectFrame-1)/algo.DirectFrame) }

func frame(b []byte, f int) []byte {
	lo := f * algo.DirectFrame
	return b[lo:min(lo+algo.DirectFrame, len(b))]
}

func (c *Comm) checkPeer(what string, peer int, allowAny bool) error {
	if allowAny && peer == transport.AnySource {
		return nil
	}
	if peer < 0 || peer >= c.size {
		return fmt.Errorf("%w: %s rank %d is outside the group of %d ranks", ErrInvalid, what, peer, c.size)
	}
	return nil
}

// Send sends count elements of buf to peer with tag. It returns once buf may
// be reused; it waits for the matching receive to be posted only when the
// peer already holds GOHCCL_EARLY_BYTES of this rank's frames that no
// receive asked for yet (docs/protocol.md, "Flow").
func (c *Comm) Send(peer int, tag int64, buf []byte, count int, dt reduce.DType, timeout time.Duration) error {
	if err := c.checkPeer("send destination", peer, false); err != nil {
		return err
	}
	if err := checkBuf("send buffer", buf, count, dt); err != nil {
		return err
	}
	if err := c.Err(); err != nil {
		c.dumpOnFailure(err)
		return fmt.Errorf("%w: %v", ErrBroken, err)
	}
	h := p2pHeader(tag, count, dt)
	now := time.Now()
	deadline := c.deadlineFrom(now, timeout)
	rec := c.flight.Begin(&flight.Record{Kind: transport.KindSend, DType: dt, Count: uint64(count),
		Root: -1, Peer: int32(peer), Tag: tag, State: flight.Running}, now)
	for f := 0; f < framesFor(len(buf)); f++ {
		p := frame(buf, f)
		h.Len = uint32(len(p))
		if err := c.mesh.Send(peer, &h, p, deadline); err != nil {
			err = fmt.Errorf("send to rank %d (tag %d) on rank %d failed: %w", peer, tag, c.rank, err)
			c.flight.End(rec, true, []int{peer})
			c.fail(err)
			return err
		}
	}
	c.flight.End(rec, false, nil)
	return nil
}

// PostRecv posts a receive of count elements from peer (or
// transport.AnySource) with tag into buf, and returns at once.
func (c *Comm) PostRecv(peer int, tag int64, buf []byte, count int, dt reduce.DType) (*RecvRequest, error) {
	if err := c.checkPeer("receive source", peer, true); err != nil {
		return nil, err
	}
	if err := checkBuf("receive buffer", buf, count, dt); err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		c.dumpOnFailure(err)
		return nil, fmt.Errorf("%w: %v", ErrBroken, err)
	}
	r := c.p2p.pool.Get().(*RecvRequest)
	n := framesFor(len(buf))
	if cap(r.frames) < n {
		r.frames = make([]transport.Recv, n)
	}
	r.frames = r.frames[:n]
	r.buf, r.peer, r.any = buf, peer, peer == transport.AnySource
	r.want = p2pHeader(tag, count, dt)
	r.rec = 0
	if c.flight != nil {
		r.rec = c.flight.Begin(&flight.Record{Kind: transport.KindSend, Recv: true, DType: dt, Count: uint64(count),
			Root: -1, Peer: int32(peer), Tag: tag, State: flight.Queued}, time.Now())
	}
	post := n
	if r.any {
		post = 1
	}
	for f := 0; f < post; f++ {
		c.postFrame(r, f, peer)
	}
	return r, nil
}

func (c *Comm) postFrame(r *RecvRequest, f, peer int) {
	fr := &r.frames[f]
	fr.Peer = peer
	fr.Want = r.want
	fr.Buf = frame(r.buf, f)
	fr.Want.Len = uint32(len(fr.Buf))
	c.mesh.Post(fr)
}

// Test reports whether every frame of r has arrived (or failed).
func (r *RecvRequest) Test() bool {
	if r.any && len(r.frames) > 1 {
		return false // frames after the first are posted by WaitRecv
	}
	for i := range r.frames {
		if !r.frames[i].Done() {
			return false
		}
	}
	return true
}

// WaitRecv waits for r and returns the sender's rank. r is released, and
// must not be used again, whatever the result.
func (c *Comm) WaitRecv(r *RecvRequest, timeout time.Duration) (int, error) {
	defer func() {
		r.buf = nil
		c.p2p.pool.Put(r)
	}()
	deadline := c.deadline(timeout)
	m := c.mesh.Matcher()
	source := r.peer
	c.flight.Start(r.rec)
	for f := range r.frames {
		if r.any && f > 0 {
			c.postFrame(r, f, source)
		}
		fr := &r.frames[f]
		err := m.Wait(fr, deadline)
		if err == nil {
			source = fr.Source
			continue
		}
		err = fmt.Errorf("recv from %s (tag %d, %d %s elements) on rank %d failed: %w",
			sourceName(r.peer), r.want.Tag, r.want.Count, r.want.DType, c.rank, err)
		c.flight.End(r.rec, true, c.awaitedBy(err, r.frames))
		c.fail(err)
		for i := range r.frames {
			m.WaitClaimed(&r.frames[i])
		}
		return source, err
	}
	c.flight.End(r.rec, false, nil)
	return source, nil
}

func sourceName(peer int) string {
	if peer == transport.AnySource {
		return "any rank"
	}
	return fmt.Sprintf("rank %d", peer)
}
