package mesh

import "fmt"

// Broadcast copies root's buf into every other rank's buf. A chunk is the
// next n*lay.buf bytes: the root copies it into buffer b of every rank and
// publishes it, the others copy it out and release it. The root waits only
// for a buffer to come free, so it runs up to depth-1 chunks ahead, and
// every rank waits at the last chunk for every rank's stamp (each rank
// posts one per chunk), so that ranks that disagree on the root or the
// operation fail instead of returning their own data. Per rank: the root
// reads and writes S, every other rank reads and writes S. c.Variant is
// OneShot (the region), SingleCopy (two ranks; the other reads root's
// buf straight into its own) or Eager (at most EagerBytes; see
// broadcastEager).
func (e *Engine) Broadcast(c *Call, buf []byte, root int) error {
	if _, err := checkData(c, len(buf)); err != nil {
		return err
	}
	if err := e.checkVariant(c, OneShot, SingleCopy, Eager); err != nil {
		return err
	}
	if err := e.checkRoot(c, root); err != nil {
		return err
	}
	s := schedBroadcast
	if c.Variant == Eager {
		if len(buf) > EagerBytes {
			return fmt.Errorf("mesh: %s: the eager schedule carries at most %d bytes, not %d", describeOp(&c.Stamp), EagerBytes, len(buf))
		}
		s = schedBroadcastEager
	}
	return e.run(c, s, len(buf) == 0, nil, func() error {
		switch c.Variant {
		case SingleCopy:
			return e.broadcastSingleCopy(buf, root)
		case Eager:
			return e.broadcastEager(buf, root)
		}
		return e.broadcast(buf, root)
	})
}

// broadcastEager is the broadcast through the root's eager slots, a chunk
// per EagerSlot bytes, chunk k in slot k%stamps, without the end-of-op
// round. A reader posts its stamp, awaits the root's, compares it and
// copies the slot out, so a reader that returns has the root's data for
// the operation it called. The root posts its data and stamp and returns;
// it holds each chunk until it has compared every reader's stamp for it
// (verify), which it does as stamps arrive, in full before any operation
// that is not an eager broadcast, and before it reuses the slot. A rank
// that took itself for the root, or ran another operation, thus fails the
// root too, one or more operations later; the root's own buffer is never
// written, so what it returned is not wrong.
func (e *Engine) broadcastEager(buf []byte, root int) error {
	chunks := (len(buf) + EagerSlot - 1) / EagerSlot
	e.chunks = chunks
	for i := range chunks {
		k, _ := e.step(i)
		if k >= stamps {
			if err := e.verify(k + 1 - stamps); err != nil {
				return err
			}
		}
		if err := e.claimBack(k, stamps); err != nil {
			return err
		}
		e.open(schedBroadcastEager, k)
		part := buf[i*EagerSlot : min((i+1)*EagerSlot, len(buf))]
		slot := e.region[e.lay.eager(root, int(k%stamps)):][:len(part)]
		if e.me == root {
			copy(slot, part)
			e.post(2*k + 1)
			e.hold(k)
		} else {
			e.post(2*k + 1)
			if err := e.await(root, 2*k+1, true, false); err != nil {
				return err
			}
			copy(part, slot)
		}
		if err := e.verify(0); err != nil {
			return err
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}

// broadcast runs the chunks of Broadcast. A chunk is n buffers' worth
// (n*lay.buf bytes): the root writes its part j into rank j's buffer b,
// which no other rank writes during a broadcast, so an operation takes n
// times fewer chunks, and hand-offs, than through the root's buffer alone.
// With more ranks than cores each hand-off can be a futex wake-up.
//
// Since a reader also reads buffers that other ranks own, a rank that ran
// another operation could have written them: every rank checks every
// stamp at the last chunk, and the operation fails on all who see it.
func (e *Engine) broadcast(buf []byte, root int) error {
	P := e.lay.buf
	B := e.n * P
	chunks := (len(buf) + B - 1) / B
	put := plainCopy
	if len(buf) >= e.opt.StreamMin {
		put = stream
	}
	e.chunks = chunks
	for i := range chunks {
		k, b := e.step(i)
		chunk := buf[i*B : min((i+1)*B, len(buf))]
		e.open(schedBroadcast, k)
		// Only the stamp of a reader's post is read; it is written into
		// stamp line b, so readers wait for the claim too.
		if err := e.claim(k); err != nil {
			return err
		}
		if e.me == root {
			for j := 0; j*P < len(chunk); j++ {
				copy(e.slot(j, b), chunk[j*P:min((j+1)*P, len(chunk))])
			}
			e.post(2*k + 1)
		} else {
			e.post(2*k + 1)
			if err := e.await(root, 2*k+1, true, false); err != nil {
				return err
			}
			for j := 0; j*P < len(chunk); j++ {
				part := chunk[j*P : min((j+1)*P, len(chunk))]
				put(part, e.slot(j, b)[:len(part)])
			}
		}
		// The root reads nothing from the others, so without this a rank
		// that believes it is the root would return its own data.
		if i == chunks-1 {
			if err := e.awaitAll(2*k+1, true); err != nil {
				return err
			}
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}
