package mesh

import (
	"fmt"
)

// AllGather fills out with every rank's in, in rank order: out holds n
// blocks of len(in) bytes. in must not overlap out, except that it may be
// out's block me exactly.
//
// A chunk is the next lay.buf bytes of every block: each rank copies its
// part into its buffer and publishes it, copies it into its own block of
// out, and, ahead chunks later, waits for every peer's and copies theirs
// out. Per rank: reads S/n +
// (n-1)/n S, writes S/n + S (S = len(out)). c.Variant is OneShot (the
// region) or SingleCopy (two ranks; each reads the peer's in straight into
// out).
func (e *Engine) AllGather(c *Call, in, out []byte) error {
	if _, err := checkData(c, len(in)); err != nil {
		return err
	}
	if err := e.checkVariant(c, OneShot, SingleCopy); err != nil {
		return err
	}
	if len(out) != e.n*len(in) {
		return fmt.Errorf("mesh: %s: allgather output of %d bytes is not %d blocks of %d", describeOp(&c.Stamp), len(out), e.n, len(in))
	}
	return e.run(c, schedAllGather, len(in) == 0, func() { copy(out, in) }, func() error {
		if c.Variant == SingleCopy {
			return e.allGatherSingleCopy(in, out)
		}
		return e.allGather(schedAllGather, in, out, blocked{n: e.n, piece: e.lay.buf, equal: len(in)})
	})
}

// AllGatherBlocks is the level0 allgather of a hierarchical all-reduce, in
// place: buf holds count elements split by pattern.Blocks(count, n, i), and
// afterwards every block holds what its owner's block held.
func (e *Engine) AllGatherBlocks(c *Call, buf []byte, count int) error {
	es, err := checkData(c, len(buf))
	if err != nil {
		return err
	}
	if len(buf) != count*es {
		return fmt.Errorf("mesh: %s: buffer of %d bytes for %d %s elements", describeOp(&c.Stamp), len(buf), count, c.DType)
	}
	return e.run(c, schedAllGatherBlocks, count == 0, nil, func() error {
		bl := blocked{count: count, n: e.n, es: es, piece: e.lay.buf}
		off, l := bl.block(e.me)
		return e.allGather(schedAllGatherBlocks, buf[off:off+l], buf, bl)
	})
}

// allGather runs the chunks of an allgather: p walks out a whole buffer
// (lay.buf bytes) of every block at a time, and in is block me's data.
func (e *Engine) allGather(s schedule, in, out []byte, p blocked) error {
	chunks := p.chunks()
	e.chunks = chunks
	base, _ := p.block(e.me)
	put := plainCopy
	if len(out) >= e.opt.StreamMin {
		put = stream
	}
	// Each chunk is posted ahead chunks before it is copied out (see ahead).
	post := func(i int) error {
		k, b := e.step(i)
		if err := e.claim(k); err != nil {
			return err
		}
		e.open(s, k)
		lo, hi := p.part(e.me, i)
		own := in[lo-base : hi-base]
		copy(e.slot(e.me, b), own)
		e.post(2*k + 1)
		if dst := out[lo:hi]; len(dst) > 0 && &dst[0] != &own[0] {
			put(dst, own)
		}
		return nil
	}
	posted := 0
	for i := range chunks {
		k, b, err := e.enterAhead(s, i, chunks, &posted, post)
		if err != nil {
			return err
		}
		for j := range e.n {
			if j != e.me {
				lo, hi := p.part(j, i)
				put(out[lo:hi], e.slot(j, b))
			}
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}
