package mesh

// Broadcast copies root's buf into every other rank's buf. A chunk is the
// next lay.buf bytes: the root copies it into its buffer and publishes it,
// the others copy it out and release it. The root waits only for a buffer
// to come free, so it runs up to depth-1 chunks ahead, and at the last chunk
// for every rank's stamp (each rank posts one per chunk), so that ranks that
// disagree on the root fail instead of returning their own data. Per rank: the root
// reads and writes S, every other rank reads and writes S.
func (e *Engine) Broadcast(c *Call, buf []byte, root int) error {
	if _, err := checkData(c, len(buf)); err != nil {
		return err
	}
	if err := e.checkRoot(c, root); err != nil {
		return err
	}
	return e.run(c, schedBroadcast, len(buf) == 0, nil, func() error { return e.broadcast(buf, root) })
}

// broadcast runs the chunks of Broadcast.
func (e *Engine) broadcast(buf []byte, root int) error {
	B := e.lay.buf
	chunks := (len(buf) + B - 1) / B
	put := plainCopy
	if len(buf) >= streamMin {
		put = stream
	}
	e.chunks = chunks
	for i := range chunks {
		k, b := e.step(i)
		chunk := buf[i*B : min((i+1)*B, len(buf))]
		e.open(schedBroadcast, k)
		if e.me == root {
			if err := e.claim(k); err != nil {
				return err
			}
			copy(e.slot(root, b), chunk)
			e.post(b, 2*k+1)
			// The root reads nothing from the others, so without this
			// a rank that believes it is the root would return its own
			// data. It checks every rank's stamp once per operation.
			if i == chunks-1 {
				if err := e.awaitAll(2*k+1, b, true); err != nil {
					return err
				}
			}
		} else {
			// Only the stamp of this post is read (by the root); it is
			// written into stamp line b, so it waits for the claim too.
			if err := e.claim(k); err != nil {
				return err
			}
			e.post(b, 2*k+1)
			if err := e.await(root, 2*k+1, b, true, false); err != nil {
				return err
			}
			put(chunk, e.slot(root, b))
		}
		e.release(k)
	}
	e.k += uint64(chunks)
	return nil
}
