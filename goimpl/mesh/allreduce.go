package mesh

import (
	"fmt"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
)

// AllReduce reduces buf over the local ranks, in place: len(buf) is count
// elements of c.DType, and every rank ends with the same bits. c.Variant
// is OneShot, TwoPhase or SingleCopy (two ranks; singlecopy.go). With S the
// bytes per rank and n the local ranks, a rank moves (docs/mesh.md derives
// these):
//
//	one-shot:    reads (n+1)S, writes 2S; 1 wait per chunk
//	two-phase:   reads (3n-1)/n S, writes 2S; 2 waits per chunk
//	single copy: reads 2S, writes 1.5S, half of it by the kernel; 3 waits
func (e *Engine) AllReduce(c *Call, buf []byte) error {
	es, err := e.checkReduce(c, len(buf))
	if err != nil {
		return err
	}
	if err := e.checkVariant(c, OneShot, TwoPhase, SingleCopy); err != nil {
		return err
	}
	return e.run(c, schedAllReduceOneShot, len(buf) == 0, nil, func() error {
		switch c.Variant {
		case SingleCopy:
			return e.allReduceSingleCopy(buf)
		case TwoPhase:
			return e.twoPhase(schedAllReduceTwoPhase, buf, len(buf)/es, -1)
		}
		return e.allReduceOneShot(buf)
	})
}

// allReduceOneShot is the small-message schedule. A chunk is the next
// lay.buf bytes of buf. For each chunk, every rank copies its part of buf
// into its buffer, publishes it, waits for every peer's, and reduces all n
// inputs itself in rank order 0..n-1, so every rank computes the same bits
// without a second exchange. Per rank: reads S (copy in) + nS (reduce),
// writes S + S.
func (e *Engine) allReduceOneShot(buf []byte) error {
	B := e.lay.buf
	chunks := (len(buf) + B - 1) / B
	e.chunks = chunks
	// Inputs are posted ahead chunks past the one being reduced, so that a
	// peer reads them from L3 rather than from this core's L2 (see ahead).
	post := func(i int) error {
		k, b := e.step(i)
		if err := e.claim(k); err != nil {
			return err
		}
		e.open(schedAllReduceOneShot, k)
		copy(e.slot(e.me, b), buf[i*B:min((i+1)*B, len(buf))])
		e.post(2*k + 1)
		return nil
	}
	posted := 0
	for i := range chunks {
		k, b, err := e.enterAhead(schedAllReduceOneShot, i, chunks, &posted, post)
		if err != nil {
			return err
		}
		// Ranks 0 and 1 take their own input from buf (reducesOverOwn);
		// later ranks read their copy.
		chunk := buf[i*B : min((i+1)*B, len(buf))]
		own := chunk
		if !reducesOverOwn(e.me) {
			own = e.slot(e.me, b)[:len(chunk)]
		}
		e.reduceInto(chunk, own, b, 0)
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}

// twoPhase is the large-message schedule of AllReduce (root < 0) and of
// Reduce to root: a reduce-scatter and an allgather fused chunk by chunk.
// buf splits into n blocks (pattern.Blocks(count, n, r)); block r is rank
// r's to reduce. A chunk takes the next piece (lay.piece bytes) of every
// block. For each chunk:
//
//  1. rank i copies its pieces of the other ranks' blocks into its buffer
//     (piece r at offset r*piece) and publishes them (ready = 2k+1); its own
//     piece it reads from buf;
//  2. it reduces piece i over all ranks, in rank order, into piece i of its
//     buffer (which held nothing) and publishes that (ready = 2k+2); local
//     ranks 0 and 1, whose own input the reduction reads first, reduce
//     into their message in place where the result belongs there (every
//     rank of an all-reduce, a reduce's root) and copy it into the buffer
//     (see inPlace below);
//  3. it posts the next chunk's inputs, so that the peers find them when
//     they get there, then copies every rank's reduced piece into buf: every
//     rank for an all-reduce, only the root for a reduce.
//
// Only one chunk goes ahead here, not ahead chunks: ready says 2k+1 for
// inputs and 2k+2 for results, so inputs of chunk k+2 posted before the
// results of chunk k would announce those results too early.
//
// Per rank: copy in reads and writes (n-1)/n S, the reduction reads S and
// writes S/n, the copy out reads and writes S: reads (3n-1)/n S, writes 2S
// (a reduce's non-roots skip the copy out: (2n-1)/n S read, S written). In
// place, the reduction writes its S/n to buf and a copy moves it to the
// buffer, and the copy out leaves that piece: the same bytes, written where
// they are cheaper.
func (e *Engine) twoPhase(s schedule, buf []byte, count, root int) error {
	es, pb := e.call.DType.Size(), e.lay.piece
	bl := blocked{count: count, n: e.n, es: es, piece: pb}
	chunks := bl.chunks()
	e.chunks = chunks
	// inPlace: the reduction writes the caller's message, in this core's
	// cache, and a copy publishes it, instead of the reduction's vector
	// stores going into buffer lines the peers read last time round, each
	// fetched from a peer's cache before it is written: at 2 ranks
	// (BenchmarkAllReduce, procs=2, two-phase) 1 MiB took 65 us an op
	// instead of 87 and 16 MiB 1.46 ms instead of 1.78, 64 KiB the same.
	inPlace := reducesOverOwn(e.me) && (root < 0 || e.me == root)
	if err := e.postPieces(s, buf, bl, 0); err != nil {
		return err
	}
	for i := range chunks {
		k, b := e.step(i)
		if err := e.awaitAll(2*k+1, true); err != nil {
			return err
		}
		lo, hi := bl.part(e.me, i)
		own, reduced := buf[lo:hi], e.slot(e.me, b)[e.me*pb:][:hi-lo]
		if inPlace {
			e.reduceInto(own, own, b, e.me*pb)
			copy(reduced, own)
		} else {
			e.reduceInto(reduced, own, b, e.me*pb)
		}
		e.ready[e.me].Store(2*k + 2)
		if i+1 < chunks {
			if err := e.postPieces(s, buf, bl, i+1); err != nil {
				return err
			}
			e.chunk = i
		}
		if root < 0 || e.me == root {
			if err := e.awaitAll(2*k+2, false); err != nil {
				return err
			}
			for r := range e.n {
				if inPlace && r == e.me {
					continue // the result is in buf already
				}
				lo, hi := bl.part(r, i)
				copy(buf[lo:hi], e.slot(r, b)[r*pb:])
			}
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}

// postPieces is step 1 of a two-phase chunk i: claim, stamp, copy this
// rank's pieces of the other blocks into its buffer, publish.
func (e *Engine) postPieces(s schedule, buf []byte, bl blocked, i int) error {
	k, b := e.step(i)
	if err := e.claim(k); err != nil {
		return err
	}
	e.open(s, k)
	slot := e.slot(e.me, b)
	for r := range e.n {
		if r != e.me {
			lo, hi := bl.part(r, i)
			copy(slot[r*bl.piece:], buf[lo:hi])
		}
	}
	e.post(2*k + 1)
	return nil
}

// blocked is a buffer split into n blocks, walked a piece (of piece bytes)
// of every block at a time: chunk i takes bytes [i*piece, (i+1)*piece) of
// each block, or what is left of it. The blocks are pattern.Blocks(count,
// n, r) of es-byte elements, or, when equal is set, n blocks of equal bytes
// each, one after the other.
type blocked struct {
	count, n, es int
	piece        int
	equal        int
}

// block returns block r's bytes.
func (bl blocked) block(r int) (off, l int) {
	if bl.equal > 0 {
		return r * bl.equal, bl.equal
	}
	off, l = pattern.Blocks(bl.count, bl.n, r)
	return off * bl.es, l * bl.es
}

// chunks is the number of pieces of the longest block (block 0).
func (bl blocked) chunks() int {
	_, l := bl.block(0)
	return (l + bl.piece - 1) / bl.piece
}

// part returns the bytes of the buffer that chunk i takes from block r.
func (bl blocked) part(r, i int) (lo, hi int) {
	off, l := bl.block(r)
	s := min(i*bl.piece, l)
	return off + s, off + min(s+bl.piece, l)
}

// reduceInto computes dst = x_0 op x_1 op ... op x_(n-1), where x_me is own
// and x_j is peer j's buffer (of the current chunk, buffer b) from byte off.
// The order is the same on every rank, so equal inputs give equal bits.
// dst must not overlap own, except that it may be own exactly where
// reducesOverOwn(e.me).
func (e *Engine) reduceInto(dst, own []byte, b, off int) {
	c := e.call
	x := func(j int) []byte {
		if j == e.me {
			return own
		}
		return e.slot(j, b)[off : off+len(dst)]
	}
	c.Kernel3(dst, x(0), x(1))
	for j := 2; j < e.n; j++ {
		c.Kernel(dst, x(j))
	}
}

// reducesOverOwn reports whether reduceInto may write its result over own
// input on local rank me: on ranks 0 and 1, whose input the first step
// reads before it writes; a later rank's would be overwritten before the
// reduction reaches it.
func reducesOverOwn(me int) bool { return me <= 1 }

// checkReduce validates a reducing operation's call and buffer length and
// returns the element size.
func (e *Engine) checkReduce(c *Call, n int) (int, error) {
	es := c.DType.Size()
	switch {
	case es == 0:
		return 0, fmt.Errorf("mesh: %s: invalid dtype %s", describeOp(&c.Stamp), c.DType)
	case c.Kernel3 == nil || c.Kernel == nil && e.n > 2:
		return 0, fmt.Errorf("mesh: %s: no reduce kernel", describeOp(&c.Stamp))
	case n%es != 0:
		return 0, fmt.Errorf("mesh: %s: %d bytes is not a whole number of %s elements", describeOp(&c.Stamp), n, c.DType)
	}
	return es, nil
}

// checkData validates a non-reducing operation's dtype and buffer length.
func checkData(c *Call, n int) (int, error) {
	es := c.DType.Size()
	switch {
	case es == 0:
		return 0, fmt.Errorf("mesh: %s: invalid dtype %s", describeOp(&c.Stamp), c.DType)
	case n%es != 0:
		return 0, fmt.Errorf("mesh: %s: %d bytes is not a whole number of %s elements", describeOp(&c.Stamp), n, c.DType)
	}
	return es, nil
}
