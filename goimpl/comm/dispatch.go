package comm

import (
	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// allReduce runs the all-reduce schedule the tuner picks for this size.
func (c *Comm) allReduce(o *algo.Op, buf []byte, count int) error {
	ch := c.tuner.Choose(tune.AllReduce, len(buf))
	if ch.Algo == tune.Hier {
		l0 := algo.Level0Ring
		if ch.Level0 == tune.RHD {
			l0 = algo.Level0RHD
		}
		return algo.AllReduceHier(o, buf, count, c.hier, l0, allReduceFunc(ch.Level1))
	}
	return allReduceFunc(ch.Algo)(o, buf, count)
}

func allReduceFunc(a tune.Algo) algo.AllReduceFunc {
	switch a {
	case tune.Tree:
		return algo.AllReduceTree
	case tune.DTree:
		return algo.AllReduceDoubleTree
	case tune.RHD:
		return algo.AllReduceRHD
	}
	return algo.AllReduceRing
}

// broadcast runs the broadcast schedule the tuner picks for this size.
func (c *Comm) broadcast(o *algo.Op, buf []byte, root int) error {
	if c.size == 1 || len(buf) == 0 {
		return nil
	}
	switch c.tuner.Choose(tune.Broadcast, len(buf)).Algo {
	case tune.Ring:
		return algo.BroadcastChain(o, buf, root)
	case tune.Tree:
		return algo.BroadcastBinaryTree(o, buf, root)
	case tune.DTree:
		return algo.BroadcastDoubleTree(o, buf, root)
	}
	return algo.BroadcastTree(o, buf, root)
}

// reduce runs the reduce schedule the tuner picks for this size.
func (c *Comm) reduce(o *algo.Op, buf []byte, root int) error {
	if c.size == 1 || len(buf) == 0 {
		return nil
	}
	switch c.tuner.Choose(tune.Reduce, len(buf)).Algo {
	case tune.Ring:
		return algo.ReduceChain(o, buf, root)
	case tune.Tree:
		return algo.ReduceBinaryTree(o, buf, root)
	case tune.DTree:
		return algo.ReduceDoubleTree(o, buf, root)
	}
	return algo.ReduceTree(o, buf, root)
}
