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
		c.path.Divide(dt, b, c.size)
	}
}

// choose asks the table for coll moving bytes (the same count on every
// rank: the tuner's choice must be).
func (c *Comm) choose(coll tune.Coll, bytes int) tune.Choice {
	if c.choice = c.pinned[coll]; c.choice.Row == nil {
		c.choice = c.tuner.Choose(coll, bytes)
		c.measured, c.measuredColl, c.measuredBytes = c.tuner.Measuring(), coll, bytes
	}
	c.recordCollective(c.choice)
	return c.choice
}

// run runs ch on this rank with the arguments in c.args: the engine's call
// takes the op's stamp, deadline and kernels first, for the rows that run
// on it.
func (c *Comm) run(ch tune.Choice) error {
	if c.x.Node != nil {
		o := &c.op
		c.call.Stamp, c.call.Deadline = o.Stamp, o.Deadline
		c.call.DType, c.call.Kernel, c.call.Kernel3 = o.DType, o.Kernel, o.Kernel3
	}
	return ch.Run(&c.x, &c.args)
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
	if err := c.begin(fp, timeout, true); err != nil {
		return err
	}
	c.args = tune.Args{Buf: buf, Count: count}
	if err := c.run(c.choose(tune.AllReduce, len(buf))); err != nil {
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
	if err := c.begin(fp, timeout, false); err != nil {
		return err
	}
	c.args = tune.Args{Buf: buf, Count: count, Root: root}
	return c.end(c.run(c.choose(tune.Broadcast, len(buf))))
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
	if err := c.begin(fp, timeout, true); err != nil {
		return err
	}
	c.args = tune.Args{Buf: buf, Count: count, Root: root}
	if err := c.run(c.choose(tune.Reduce, len(buf))); err != nil {
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
	if err := c.begin(fp, timeout, false); err != nil {
		return err
	}
	c.args = tune.Args{In: in, Out: out, Count: count}
	return c.end(c.run(c.choose(tune.AllGather, len(out))))
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
	if err := c.begin(fp, timeout, true); err != nil {
		return err
	}
	c.args = tune.Args{In: in, Out: out, Count: count}
	if err := c.run(c.choose(tune.ReduceScatter, len(in))); err != nil {
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
	if err := c.begin(fp, timeout, false); err != nil {
		return err
	}
	c.args = tune.Args{In: in, Out: out, Count: count, Root: root}
	return c.end(c.run(c.choose(tune.Gather, count*dt.Size()*c.size)))
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
	if err := c.begin(fp, timeout, false); err != nil {
		return err
	}
	c.args = tune.Args{In: in, Out: out, Count: count, Root: root}
	return c.end(c.run(c.choose(tune.Scatter, count*dt.Size()*c.size)))
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
	if err := c.begin(fp, timeout, false); err != nil {
		return err
	}
	// The ranks' byte counts differ: the choice is made for no bytes,
	// the same on every rank.
	c.args = tune.Args{In: in, Out: out, Send: send, Recv: recv}
	return c.end(c.run(c.choose(tune.AllToAll, 0)))
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
	if err := c.begin(fp, timeout, false); err != nil {
		return err
	}
	c.args = tune.Args{}
	return c.end(c.run(c.choose(tune.Barrier, 0)))
}
