package mesh

// Reduce reduces buf over the local ranks into root's buf, in place; the
// other ranks' buf is left as it was.
//
// OneShot: the root reduces every input itself: every
// rank copies its chunk into its buffer (the root only if it is rank 2 or
// later, see allReduceOneShot) and publishes it, the root waits for all and
// reduces in rank order into buf. The others wait only for a free buffer,
// and at the last chunk for the root's stamp. Per rank: S read and written by the others; (n+1)S read and S
// written by the root.
//
// TwoPhase: the two-phase all-reduce whose second phase only the root
// runs: every rank reduces its piece of each chunk into its buffer, and
// the root copies all of them out. Per rank: (2n-1)/n S read and S written
// by the others, (3n-1)/n S read and 2S written by the root.
func (e *Engine) Reduce(c *Call, buf []byte, root int) error {
	es, err := e.checkReduce(c, len(buf))
	if err != nil {
		return err
	}
	if err := e.checkRoot(c, root); err != nil {
		return err
	}
	if err := e.checkVariant(c, OneShot, TwoPhase); err != nil {
		return err
	}
	return e.run(c, schedReduceOneShot, len(buf) == 0, nil, func() error {
		if c.Variant == TwoPhase {
			return e.twoPhase(schedReduceTwoPhase, buf, len(buf)/es, root)
		}
		return e.reduceOneShot(buf, root)
	})
}

// reduceOneShot is the small-message schedule of Reduce (see Reduce).
func (e *Engine) reduceOneShot(buf []byte, root int) error {
	B := e.lay.buf
	chunks := (len(buf) + B - 1) / B
	e.chunks = chunks
	for i := range chunks {
		k, b := e.step(i)
		chunk := buf[i*B : min((i+1)*B, len(buf))]
		if err := e.claim(k); err != nil {
			return err
		}
		e.open(schedReduceOneShot, k)
		mine := e.slot(e.me, b)[:len(chunk)]
		if e.me != root || root >= 2 {
			copy(mine, chunk)
		}
		e.post(2*k + 1)
		if e.me == root {
			if err := e.awaitAll(2*k+1, true); err != nil {
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
			if err := e.await(root, 2*k+1, true, false); err != nil {
				return err
			}
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}
