package comm

import (
	"fmt"
	"time"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// checkBuf refuses a buffer whose length is not count elements of dt.
func checkBuf(what string, b []byte, count int, dt reduce.DType) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: unknown dtype %d", ErrInvalid, uint8(dt))
	}
	if count < 0 {
		return fmt.Errorf("%w: %s count %d is negative", ErrInvalid, what, count)
	}
	if len(b) != count*dt.Size() {
		return fmt.Errorf("%w: %s holds %d bytes, but %d %s elements need %d", ErrInvalid, what, len(b), count, dt, count*dt.Size())
	}
	return nil
}

func (c *Comm) checkRoot(root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: root %d is outside the group of %d ranks", ErrInvalid, root, c.size)
	}
	return nil
}

func checkOp(dt reduce.DType, op reduce.Op) error {
	if err := reduce.Check(dt, op); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// finishAvg divides a sum by the group size when op is Avg.
func (c *Comm) finishAvg(op reduce.Op, dt reduce.DType, b []byte) {
	if op == reduce.Avg {
		reduce.DivideInPlace(dt, b, c.size)
	}
}

// AllReduce reduces count elements of buf across all ranks, in place.
func (c *Comm) AllReduce(buf []byte, count int, dt reduce.DType, op reduce.Op, timeout time.Duration) error {
	if err := checkBuf("allreduce buffer", buf, count, dt); err != nil {
		return err
	}
	if err := checkOp(dt, op); err != nil {
		return err
	}
	fp := transport.Fingerprint{Kind: transport.KindAllReduce, DType: dt, Op: op, Count: uint64(count)}
	o, err := c.begin(fp, timeout, true)
	if err != nil {
		return err
	}
	if c.onMesh(tune.AllReduce) {
		err = c.local.engine.AllReduce(c.meshCall(o), buf)
	} else {
		err = c.allReduce(o, buf, count)
	}
	if err != nil {
		return c.end(err)
	}
	c.finishAvg(op, dt, buf)
	return c.end(nil)
}

// Broadcast copies root's count elements of buf to every rank.
func (c *Comm) Broadcast(buf []byte, count int, dt reduce.DType, root int, timeout time.Duration) error {
	if err := checkBuf("broadcast buffer", buf, count, dt); err != nil {
		return err
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	fp := transport.Fingerprint{Kind: transport.KindBroadcast, DType: dt, Root: int32(root), Count: uint64(count)}
	o, err := c.begin(fp, timeout, false)
	if err != nil {
		return err
	}
	if c.onMesh(tune.Broadcast) {
		return c.end(c.local.engine.Broadcast(c.meshCall(o), buf, root))
	}
	return c.end(c.broadcast(o, buf, root))
}

// Reduce reduces count elements of buf onto root, in place there; other
// ranks' buffers are not modified.
func (c *Comm) Reduce(buf []byte, count int, dt reduce.DType, op reduce.Op, root int, timeout time.Duration) error {
	if err := checkBuf("reduce buffer", buf, count, dt); err != nil {
		return err
	}
	if err := checkOp(dt, op); err != nil {
		return err
	}
	if err := c.checkRoot(root); err != nil {
		return err
	}
	fp := transport.Fingerprint{Kind: transport.KindReduce, DType: dt, Op: op, Root: int32(root), Count: uint64(count)}
	o, err := c.begin(fp, timeout, true)
	if err != nil {
		return err
	}
	if c.onMesh(tune.Reduce) {
		err = c.local.engine.Reduce(c.meshCall(o), buf, root)
	} else {
		err = c.reduce(o, buf, root)
	}
	if err != nil {
		return c.end(err)
	}
	if c.rank == root {
		c.finishAvg(op, dt, buf)
	}
	return c.end(nil)
}

// AllGather gathers count elements from each rank into out (Size*count).
func (c *Comm) AllGather(in, out []byte, count int, dt reduce.DType, timeout time.Duration) error {
	if err := checkBuf("allgather input", in, count, dt); err != nil {
		return err
	}
	if err := checkBuf("allgather output", out, count*c.size, dt); err != nil {
		return err
	}
	fp := transport.Fingerprint{Kind: transport.KindAllGather, DType: dt, Count: uint64(count)}
	o, err := c.begin(fp, timeout, false)
	if err != nil {
		return err
	}
	if c.onMesh(tune.AllGather) {
		return c.end(c.local.engine.AllGather(c.meshCall(o), in, out))
	}
	return c.end(c.allGather(o, in, out, count))
}

// ReduceScatter reduces in (Size*count elements) and leaves block Rank in
// out (count elements). in is not modified.
func (c *Comm) ReduceScatter(in, out []byte, count int, dt reduce.DType, op reduce.Op, timeout time.Duration) error {
	if err := checkBuf("reduce_scatter input", in, count*c.size, dt); err != nil {
		return err
	}
	if err := checkBuf("reduce_scatter output", out, count, dt); err != nil {
		return err
	}
	if err := checkOp(dt, op); err != nil {
		return err
	}
	fp := transport.Fingerprint{Kind: transport.KindReduceScatter, DType: dt, Op: op, Count: uint64(count)}
	o, err := c.begin(fp, timeout, true)
	if err != nil {
		return err
	}
	if c.onMesh(tune.ReduceScatter) {
		err = c.local.engine.ReduceScatter(c.meshCall(o), in, out)
	} else {
		err = c.reduceScatter(o, in, out, count)
	}
	if err != nil {
		return c.end(err)
	}
	c.finishAvg(op, dt, out)
	return c.end(nil)
}

// Gather collects count elements from every rank into root's out
// (Size*count elements; ignored elsewhere).
func (c *Comm) Gather(in, out []byte, count int, dt reduce.DType, root int, timeout time.Duration) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	if err := checkBuf("gather input", in, count, dt); err != nil {
		return err
	}
	if c.rank == root {
		if err := checkBuf("gather output", out, count*c.size, dt); err != nil {
			return err
		}
	}
	fp := transport.Fingerprint{Kind: transport.KindGather, DType: dt, Root: int32(root), Count: uint64(count)}
	o, err := c.begin(fp, timeout, false)
	if err != nil {
		return err
	}
	return c.end(algo.GatherDirect(o, in, out, root))
}

// Scatter sends block p of root's in (Size*count elements) to rank p's out.
func (c *Comm) Scatter(in, out []byte, count int, dt reduce.DType, root int, timeout time.Duration) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	if err := checkBuf("scatter output", out, count, dt); err != nil {
		return err
	}
	if c.rank == root {
		if err := checkBuf("scatter input", in, count*c.size, dt); err != nil {
			return err
		}
	}
	fp := transport.Fingerprint{Kind: transport.KindScatter, DType: dt, Root: int32(root), Count: uint64(count)}
	o, err := c.begin(fp, timeout, false)
	if err != nil {
		return err
	}
	return c.end(algo.ScatterDirect(o, in, out, root))
}

// AllToAllV sends sendCounts[p] elements at sendOffsets[p] of in to rank p
// and receives recvCounts[p] elements from p at recvOffsets[p] of out.
func (c *Comm) AllToAllV(in []byte, sendCounts, sendOffsets []int, out []byte, recvCounts, recvOffsets []int,
	dt reduce.DType, timeout time.Duration) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: unknown dtype %d", ErrInvalid, uint8(dt))
	}
	send, err := c.blocks("send", in, sendCounts, sendOffsets, dt)
	if err != nil {
		return err
	}
	recv, err := c.blocks("receive", out, recvCounts, recvOffsets, dt)
	if err != nil {
		return err
	}
	if send.Lens[c.rank] != recv.Lens[c.rank] {
		return fmt.Errorf("%w: alltoall sends %d elements to this rank itself but expects %d", ErrInvalid, sendCounts[c.rank], recvCounts[c.rank])
	}
	fp := transport.Fingerprint{Kind: transport.KindAllToAll, DType: dt}
	o, err := c.begin(fp, timeout, false)
	if err != nil {
		return err
	}
	return c.end(algo.AllToAllPairwise(o, in, send, out, recv))
}

func (c *Comm) blocks(side string, b []byte, counts, offsets []int, dt reduce.DType) (algo.Blocks, error) {
	if len(counts) != c.size || len(offsets) != c.size {
		return algo.Blocks{}, fmt.Errorf("%w: alltoall needs %d %s counts and offsets, got %d and %d", ErrInvalid, c.size, side, len(counts), len(offsets))
	}
	es := dt.Size()
	bl := algo.Blocks{Offsets: make([]int, c.size), Lens: make([]int, c.size), Counts: counts}
	for p := range counts {
		if counts[p] < 0 || offsets[p] < 0 || (offsets[p]+counts[p])*es > len(b) {
			return algo.Blocks{}, fmt.Errorf("%w: alltoall %s block for rank %d (%d elements at offset %d) lies outside the %d-element buffer",
				ErrInvalid, side, p, counts[p], offsets[p], len(b)/es)
		}
		bl.Offsets[p], bl.Lens[p] = offsets[p]*es, counts[p]*es
	}
	return bl, nil
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(timeout time.Duration) error {
	fp := transport.Fingerprint{Kind: transport.KindBarrier, DType: reduce.Uint8}
	o, err := c.begin(fp, timeout, false)
	if err != nil {
		return err
	}
	if c.local != nil && c.local.whole {
		return c.end(c.local.engine.Barrier(c.meshCall(o)))
	}
	return c.end(algo.BarrierDissemination(o))
}
