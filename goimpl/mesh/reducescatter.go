package mesh

import (
	"fmt"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// ReduceScatter reduces in over the local ranks and leaves block me of the
// result in out: in holds n equal blocks of len(out) bytes. out must not
// overlap in, except that it may be in's block me exactly.
//
// A chunk takes the next piece (lay.piece bytes) of every block: each rank
// copies its pieces of the other blocks into its buffer, publishes them,
// waits for every peer's and reduces its own piece in rank order. It is the
// first phase of the two-phase all-reduce, with one wait per chunk. Per
// rank: reads (2n-1)/n S, writes S (S = len(in)).
func (e *Engine) ReduceScatter(c *Call, in, out []byte) error {
	if _, err := e.checkReduce(c, len(out)); err != nil {
		return err
	}
	if len(in) != e.n*len(out) {
		return fmt.Errorf("mesh: %s: reduce-scatter input of %d bytes is not %d blocks of %d", describeOp(&c.Stamp), len(in), e.n, len(out))
	}
	return e.run(c, schedReduceScatter, len(out) == 0, func() { copy(out, in) }, func() error {
		return e.reduceScatter(schedReduceScatter, in, out, blocked{n: e.n, piece: e.lay.piece, equal: len(out)})
	})
}

// ReduceScatterBlocks is the level0 reduce-scatter of a hierarchical
// all-reduce, in place: buf holds count elements split by
// pattern.Blocks(count, n, i), and afterwards block me of buf holds the
// reduction over the local ranks; the other blocks are left as they were.
func (e *Engine) ReduceScatterBlocks(c *Call, buf []byte, count int) error {
	es, err := e.checkReduce(c, len(buf))
	if err != nil {
		return err
	}
	if len(buf) != count*es {
		return fmt.Errorf("mesh: %s: buffer of %d bytes for %d %s elements", describeOp(&c.Stamp), len(buf), count, c.DType)
	}
	return e.run(c, schedReduceScatterBlocks, count == 0, nil, func() error {
		bl := blocked{count: count, n: e.n, es: es, piece: e.lay.piece}
		off, _ := pattern.Blocks(count, e.n, e.me)
		return e.reduceScatter(schedReduceScatterBlocks, buf, buf[off*es:], bl)
	})
}

// reduceScatter runs the chunks of a reduce-scatter. Chunk i of block me
// goes to out at the same place relative to the start of block me (out is
// the start of block me for the in-place form).
func (e *Engine) reduceScatter(s schedule, in, out []byte, p blocked) error {
	pb := e.lay.piece
	chunks := p.chunks()
	e.chunks = chunks
	base, _ := p.block(e.me)
	// Inputs go ahead chunks before they are read (see ahead).
	post := func(i int) error { return e.postPieces(s, in, p, i) }
	posted := 0
	for i := range chunks {
		k, b, err := e.enterAhead(s, i, chunks, &posted, post)
		if err != nil {
			return err
		}
		slot := e.slot(e.me, b)
		lo, hi := p.part(e.me, i)
		own, dst := in[lo:hi], out[lo-base:hi-base]
		if direct(dst, own, e.me) {
			e.reduceInto(dst, own, b, e.me*pb)
		} else {
			res := slot[e.me*pb:][:hi-lo]
			e.reduceInto(res, own, b, e.me*pb)
			copy(dst, res)
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}

// direct reports whether reduceInto may write dst straight from own: they
// do not overlap, or dst is own exactly where reducesOverOwn(me).
func direct(dst, own []byte, me int) bool {
	if len(dst) == 0 {
		return true
	}
	d, o := uintptr(unsafe.Pointer(&dst[0])), uintptr(unsafe.Pointer(&own[0]))
	if d == o && len(dst) == len(own) {
		return reducesOverOwn(me)
	}
	return d+uintptr(len(dst)) <= o || o+uintptr(len(own)) <= d
}
