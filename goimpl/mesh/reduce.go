package mesh

import (
	"fmt"

	"github.com/gohccl/gohccl/goimpl/shm"
)

// Reduce reduces buf over the local ranks into root's buf, in place; the
// other ranks' buf is left as it was.
//
// Up to reduceLimit bytes the root reduces every input itself: every
// rank copies its chunk into its buffer (the root only if it is rank 2 or
// later, see allReduceOneShot) and publishes it, the root waits for all and
// reduces in rank order into buf. The others wait only for a free buffer,
// and at the last chunk for the root's stamp. Per rank: S read and written by the others; (n+1)S read and S
// written by the root.
//
// Above, it is the two-phase all-reduce whose second phase only the root
// runs: every rank reduces its piece of each chunk into its buffer, and
// the root copies all of them out. Per rank: (2n-1)/n S read and S written
// by the others, (3n-1)/n S read and 2S written by the root.
func (e *Engine) Reduce(c *Call, buf []byte, root int) (err error) {
	es, err := e.checkReduce(c, len(buf))
	if err != nil {
		return err
	}
	if root < 0 || root >= e.n {
		return fmt.Errorf("mesh: %s: root %d is not a local rank (0..%d)", describeOp(&c.Stamp), root, e.n-1)
	}
	if err := e.begin(c); err != nil {
		return err
	}
	shm.Guard()
	defer func() { err = e.end(recover(), err) }()
	switch {
	case e.n == 1:
		return nil
	case len(buf) == 0:
		return e.barrier(schedReduceOneShot)
	case len(buf) <= reduceLimit(e.n):
		return e.reduceOneShot(buf, root)
	}
	return e.reduceTwoPhase(buf, len(buf)/es, root)
}

// reduceLimit is the largest Reduce, in bytes per rank, that runs one-shot
// among n ranks (see reducePair and reduceMax).
func reduceLimit(n int) int {
	if n == 2 {
		return reducePair
	}
	return reduceMax
}

func (e *Engine) reduceOneShot(buf []byte, root int) error {
	B := e.lay.buf
	chunks := (len(buf) + B - 1) / B
	e.chunks = chunks
	for i := range chunks {
		k := e.k + uint64(i)
		b := int(k % depth)
		e.chunk = i
		chunk := buf[i*B : min((i+1)*B, len(buf))]
		if err := e.claim(k); err != nil {
			return err
		}
		e.open(schedReduceOneShot, k)
		mine := e.slot(e.me, b)[:len(chunk)]
		if e.me != root || root >= 2 {
			copy(mine, chunk)
		}
		e.post(b, 2*k+1)
		if e.me == root {
			if err := e.awaitAll(2*k+1, b, true); err != nil {
				return err
			}
			own := chunk
			if root >= 2 {
				own = mine
			}
			e.reduceInto(chunk, own, b, 0)
		} else if i == chunks-1 {
			// The others read nothing: without a look at the root's
			// stamp, ranks that each took another for the root would
			// all return as if the reduce had happened.
			if err := e.await(root, 2*k+1, b, true, false); err != nil {
				return err
			}
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}

func (e *Engine) reduceTwoPhase(buf []byte, count, root int) error {
	es, pb := e.call.DType.Size(), e.lay.piece
	bl := blocked{count: count, n: e.n, es: es, piece: pb}
	chunks := bl.chunks()
	e.chunks = chunks
	if err := e.postPieces(schedReduceTwoPhase, buf, bl, 0); err != nil {
		return err
	}
	for i := range chunks {
		k := e.k + uint64(i)
		b := int(k % depth)
		e.chunk = i
		if err := e.awaitAll(2*k+1, b, true); err != nil {
			return err
		}
		lo, hi := bl.part(e.me, i)
		e.reduceInto(e.slot(e.me, b)[e.me*pb:][:hi-lo], buf[lo:hi], b, e.me*pb)
		e.ready[e.me].Store(2*k + 2)
		if i+1 < chunks {
			if err := e.postPieces(schedReduceTwoPhase, buf, bl, i+1); err != nil {
				return err
			}
			e.chunk = i
		}
		if e.me == root {
			if err := e.awaitAll(2*k+2, b, false); err != nil {
				return err
			}
			for r := range e.n {
				lo, hi := bl.part(r, i)
				copy(buf[lo:hi], e.slot(r, b)[r*pb:])
			}
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}
