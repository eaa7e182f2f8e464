package mesh

// Barrier returns once every local rank has entered it. It takes one
// chunk and moves no data: each rank publishes its stamp, waits for every
// peer's and releases the chunk.
func (e *Engine) Barrier(c *Call) error {
	return e.run(c, schedBarrier, true, nil, nil)
}

// barrier is the one-chunk stamp exchange of Barrier and of every
// zero-count operation: an operation with nothing to move still checks its
// stamp against every peer's and keeps the chunk sequence in step, so a rank
// that issued something else learns of it in this operation.
func (e *Engine) barrier(s schedule) error {
	k := e.k
	e.chunk, e.chunks = 0, 1
	if err := e.claim(k); err != nil {
		return err
	}
	e.open(s, k)
	e.post(2*k + 1)
	if err := e.awaitAll(2*k+1, true); err != nil {
		return err
	}
	e.release(k)
	e.k++
	return nil
}
