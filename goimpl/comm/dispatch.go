package comm

import (
	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// allReduce runs the all-reduce schedule the tuner picks for this size.
func (c *Comm) allReduce(o *algo.Op, buf []byte, count int) error {
	ch := c.tuner.Choose(tune.AllReduce, len(buf))
	if ch.Algo == tune.Hier {
		if c.meshLevel0(tune.AllReduce) {
			return c.allReduceHierMesh(o, buf, count, allReduceFunc(ch.Level1))
		}
		return algo.AllReduceHier(o, buf, count, c.hier, level0(ch.Level0), allReduceFunc(ch.Level1))
	}
	return allReduceFunc(ch.Algo)(o, buf, count)
}

// level0 and level1 name the schedules of a hierarchical choice's levels.
func level0(a tune.Algo) algo.Level0 {
	if a == tune.RHD {
		return algo.Level0RHD
	}
	return algo.Level0Ring
}

func level1(a tune.Algo) algo.Level1 {
	if a == tune.RHD {
		return algo.Level1RHD
	}
	return algo.Level1Ring
}

// level0For is the level0 of a hierarchical allgather or reduce-scatter:
// the mesh engine where this host is the node and GOHCCL_ALGO leaves
// level0 open (meshLevel0) and nodes hold consecutive ranks, else the
// tuner's schedule over the links.
func (c *Comm) level0For(coll tune.Coll, a tune.Algo, h algo.Hierarchy) algo.Level0 {
	if c.meshLevel0(coll) && h.Consecutive() {
		return algo.Level0Node
	}
	return level0(a)
}

// hierarchy is this rank's two levels with the slice order the
// hierarchical allgather and reduce-scatter need.
func (c *Comm) hierarchy() algo.Hierarchy {
	h := c.hier
	h.Order = c.topo.SliceOrder()
	return h
}

// allGather runs the allgather schedule the tuner picks for this output
// size.
func (c *Comm) allGather(o *algo.Op, in, out []byte, count int) error {
	switch ch := c.tuner.Choose(tune.AllGather, len(out)); ch.Algo {
	case tune.RHD:
		return algo.AllGatherRD(o, in, out, count)
	case tune.Hier:
		h := c.hierarchy()
		return algo.AllGatherHier(o, in, out, count, h, c.level0For(tune.AllGather, ch.Level0, h), level1(ch.Level1))
	}
	return algo.AllGatherRing(o, in, out, count)
}

// reduceScatter runs the reduce-scatter schedule the tuner picks for this
// input size.
func (c *Comm) reduceScatter(o *algo.Op, in, out []byte, count int) error {
	switch ch := c.tuner.Choose(tune.ReduceScatter, len(in)); ch.Algo {
	case tune.RHD:
		return algo.ReduceScatterRH(o, in, out, count)
	case tune.Hier:
		h := c.hierarchy()
		return algo.ReduceScatterHier(o, in, out, count, h, c.level0For(tune.ReduceScatter, ch.Level0, h), level1(ch.Level1))
	}
	return algo.ReduceScatterRing(o, in, out, count)
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
