package stage

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// kind is the operation a staged call runs.
type kind uint8

const (
	allReduce kind = iota
	broadcast
	reduceOp
	allGather
	reduceScatter
	gather
	scatter
	allToAll
	barrier
	send
	recv
)

func (k kind) String() string {
	return [...]string{"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "gather",
		"scatter", "alltoall", "barrier", "send", "recv"}[k]
}

// call is the staged operation in progress. in and out are the device
// buffers (the same one for the in-place operations); count is elements per
// block, as in the host collective of the same name.
type call struct {
	kind     kind
	in, out  device.Ptr
	count    int
	dt       reduce.DType
	es       int // element size
	op       reduce.Op
	root     int
	peer     int // send and recv; recv's source once its first chunk came
	tag      int64
	deadline time.Time

	// alltoallv: the caller's counts and offsets, in elements.
	sendCounts, sendOffsets, recvCounts, recvOffsets []int

	per    int // elements of each block per chunk (the last may have fewer)
	chunks int // how many chunks; at least 1, so that every rank calls the host collective
	at     int // the chunk in progress, for errors
}

// span is one byte range of a copy: n bytes at device address dev and at
// offset host of the slot.
type span struct {
	dev  device.Ptr
	host int
	n    int
}

// chunk is one step of a staged call: what it copies down, where its host
// collective's input and output lie in the slot, what it copies up.
type chunk struct {
	down, up []span
	n        int // elements of each block in this chunk
	in, out  int // offsets of the host collective's input and output in the slot

	// alltoallv: this chunk's counts and offsets in the slot, in elements.
	sendCounts, sendOffsets, recvCounts, recvOffsets []int
	sendN, recvN                                     int // elements in the input and the output
}

// blocks is how many blocks of a chunk's elements a slot must hold for the
// call: its input's and its output's (one for the in-place operations).
func (c *call) blocks(size int) int {
	switch c.kind {
	case allGather, reduceScatter, gather, scatter:
		return size + 1
	}
	return 1
}

// cut sets per and chunks for s.call from GOHCCL_BUFFSIZE and the counts.
func (s *Stager) cut() error {
	cl := &s.call
	if cl.count == 0 {
		cl.per, cl.chunks = 0, 1
		return nil
	}
	blocks := cl.blocks(s.c.Size())
	room := s.slotBytes() - align // the output area's start is aligned
	want := min(max(cl.count*blocks*cl.es/targetChunks, minChunk), room)
	per := want / (blocks * cl.es)
	if step := align / cl.es; per >= step {
		per -= per % step // chunk boundaries on aligned addresses
	}
	if per == 0 {
		return fmt.Errorf("%w: GOHCCL_BUFFSIZE=%d leaves slots of %d bytes, too small to stage a %s of %s elements over %d ranks (it needs %d bytes)",
			comm.ErrInvalid, s.buffSize, s.slotBytes(), cl.kind, cl.dt, s.c.Size(), blocks*cl.es+align)
	}
	cl.per = min(per, cl.count)
	cl.chunks = (cl.count + cl.per - 1) / cl.per
	return nil
}

// cutAllToAll agrees with every rank on the number of chunks of an
// alltoallv: each rank's counts differ, so each proposes the chunks its own
// input and output need, and all take the largest (one host all-reduce of
// an int64). Chunk k then takes elements [m*k/K, m*(k+1)/K) of every block
// of m elements, which sender and receiver compute alike.
func (s *Stager) cutAllToAll() error {
	cl := &s.call
	total := 0
	for p := range cl.sendCounts {
		total += cl.sendCounts[p] + cl.recvCounts[p]
	}
	// A chunk's pieces round up by at most one element per block and side.
	room := s.slotBytes() - align - 2*s.c.Size()*cl.es
	if room < cl.es {
		return fmt.Errorf("%w: GOHCCL_BUFFSIZE=%d leaves slots of %d bytes, too small to stage an alltoall over %d ranks",
			comm.ErrInvalid, s.buffSize, s.slotBytes(), s.c.Size())
	}
	want := min(max(total*cl.es/targetChunks, minChunk), room)
	chunks := max(1, (total*cl.es+want-1)/want)
	binary.LittleEndian.PutUint64(s.agree[:], uint64(chunks))
	if err := s.c.AllReduce(s.agree[:], 1, reduce.Int64, reduce.Max, s.remaining()); err != nil {
		return fmt.Errorf("agreeing on the alltoall's chunks: %w", err)
	}
	cl.chunks = int(binary.LittleEndian.Uint64(s.agree[:]))
	return nil
}

// copies says whether this rank copies the call's input down and its output
// up: a rooted call's root and leaves differ.
func (c *call) copies(rank int) (down, up bool) {
	switch c.kind {
	case broadcast:
		return rank == c.root, rank != c.root
	case reduceOp, gather:
		return true, rank == c.root
	case scatter:
		return rank == c.root, true
	case send:
		return true, false
	case recv:
		return false, true
	case barrier:
		return false, false
	}
	return true, true
}

// layout fills ch with chunk k of s.call.
func (s *Stager) layout(k int, ch *chunk) {
	cl := &s.call
	ch.down, ch.up = ch.down[:0], ch.up[:0]
	if cl.kind == allToAll {
		s.layoutAllToAll(k, ch)
		return
	}
	size, rank := s.c.Size(), s.c.Rank()
	lo := k * cl.per
	ch.n = min(cl.per, cl.count-lo)
	nb := ch.n * cl.es
	down, up := cl.copies(rank)
	if nb == 0 {
		down, up = false, false
	}
	// block adds the one span of a one-block side.
	block := func(spans []span, buf device.Ptr, slotOff int) []span {
		return append(spans, span{dev: buf.Add(lo * cl.es), host: slotOff, n: nb})
	}
	// each adds one span per rank's block: block p of the device buffer
	// (count elements apart) at slot offset base + p*nb.
	each := func(spans []span, buf device.Ptr, base int) []span {
		for p := 0; p < size; p++ {
			spans = append(spans, span{dev: buf.Add((p*cl.count + lo) * cl.es), host: base + p*nb, n: nb})
		}
		return spans
	}
	ch.in, ch.out = 0, 0
	switch cl.kind {
	case allGather, gather: // one block in, size blocks out
		ch.out = alignUp(cl.per * cl.es)
		if down {
			ch.down = block(ch.down, cl.in, ch.in)
		}
		if up {
			ch.up = each(ch.up, cl.out, ch.out)
		}
	case reduceScatter, scatter: // size blocks in, one block out
		ch.out = alignUp(size * cl.per * cl.es)
		if down {
			ch.down = each(ch.down, cl.in, ch.in)
		}
		if up {
			ch.up = block(ch.up, cl.out, ch.out)
		}
	default: // in place
		if down {
			ch.down = block(ch.down, cl.in, 0)
		}
		if up {
			ch.up = block(ch.up, cl.out, 0)
		}
	}
}

// layoutAllToAll fills ch with chunk k of an alltoallv: from every block
// its share [m*k/K, m*(k+1)/K), packed one after another in the input and
// output areas.
func (s *Stager) layoutAllToAll(k int, ch *chunk) {
	cl := &s.call
	piece := func(m int) (lo, n int) {
		lo = m * k / cl.chunks
		return lo, m*(k+1)/cl.chunks - lo
	}
	ch.sendN, ch.recvN = 0, 0
	for p := range cl.sendCounts {
		lo, n := piece(cl.sendCounts[p])
		ch.sendCounts[p], ch.sendOffsets[p] = n, ch.sendN
		if n > 0 {
			ch.down = append(ch.down, span{dev: cl.in.Add((cl.sendOffsets[p] + lo) * cl.es), host: ch.sendN * cl.es, n: n * cl.es})
		}
		ch.sendN += n
	}
	ch.in, ch.out = 0, alignUp(ch.sendN*cl.es)
	for p := range cl.recvCounts {
		lo, n := piece(cl.recvCounts[p])
		ch.recvCounts[p], ch.recvOffsets[p] = n, ch.recvN
		if n > 0 {
			ch.up = append(ch.up, span{dev: cl.out.Add((cl.recvOffsets[p] + lo) * cl.es), host: ch.out + ch.recvN*cl.es, n: n * cl.es})
		}
		ch.recvN += n
	}
}

// host runs chunk k's host collective on its slot.
func (s *Stager) host(k int, ch *chunk, slot []byte) error {
	cl := &s.call
	c := s.c
	n, nb, size := ch.n, ch.n*cl.es, c.Size()
	isRoot := c.Rank() == cl.root
	switch cl.kind {
	case allReduce:
		return c.AllReduce(slot[:nb], n, cl.dt, cl.op, s.remaining())
	case broadcast:
		return c.Broadcast(slot[:nb], n, cl.dt, cl.root, s.remaining())
	case reduceOp:
		return c.Reduce(slot[:nb], n, cl.dt, cl.op, cl.root, s.remaining())
	case allGather:
		return c.AllGather(slot[:nb], slot[ch.out:ch.out+size*nb], n, cl.dt, s.remaining())
	case reduceScatter:
		return c.ReduceScatter(slot[:size*nb], slot[ch.out:ch.out+nb], n, cl.dt, cl.op, s.remaining())
	case gather:
		var out []byte
		if isRoot {
			out = slot[ch.out : ch.out+size*nb]
		}
		return c.Gather(slot[:nb], out, n, cl.dt, cl.root, s.remaining())
	case scatter:
		var in []byte
		if isRoot {
			in = slot[:size*nb]
		}
		return c.Scatter(in, slot[ch.out:ch.out+nb], n, cl.dt, cl.root, s.remaining())
	case allToAll:
		return c.AllToAllV(slot[:ch.sendN*cl.es], ch.sendCounts, ch.sendOffsets,
			slot[ch.out:ch.out+ch.recvN*cl.es], ch.recvCounts, ch.recvOffsets, cl.dt, s.remaining())
	case barrier:
		return c.Barrier(s.remaining())
	case send:
		return c.Send(cl.peer, cl.tag, slot[:nb], n, cl.dt, s.remaining())
	case recv:
		r, err := c.PostRecv(cl.peer, cl.tag, slot[:nb], n, cl.dt)
		if err != nil {
			return err
		}
		src, err := c.WaitRecv(r, s.remaining())
		if err == nil && cl.peer == transport.AnySource {
			// The rest of the message comes from where its first chunk did.
			cl.peer = src
		}
		return err
	}
	return fmt.Errorf("stage: no host collective for %s (a bug)", cl.kind)
}
