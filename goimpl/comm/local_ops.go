package comm

import (
	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/mesh"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// onMesh reports whether a collective runs on the mesh engine: every rank of
// the communicator shares this host's segment, and GOHCCL_ALGO leaves the
// collective to the automatic choice (or names mesh). On one host the mesh
// moves every byte once through memory the ranks share, which no schedule of
// messages between them can beat, so it is the automatic choice at every
// size; GOHCCL_ALGO=ring (or any other) runs that schedule over the
// shared-memory links instead.
func (c *Comm) onMesh(coll tune.Coll) bool {
	return c.local != nil && c.local.whole && c.local.meshFor[coll]
}

// meshCall fills the communicator's reusable mesh.Call from the op, so that
// a collective on the engine allocates nothing.
func (c *Comm) meshCall(o *algo.Op) *mesh.Call {
	mc := &c.local.call
	mc.Stamp, mc.Deadline = o.Stamp, o.Deadline
	mc.DType, mc.Kernel, mc.Kernel3 = o.DType, o.Kernel, o.Kernel3
	return mc
}

// meshLevel0 reports whether coll's hierarchical form (all-reduce,
// allgather, reduce-scatter) can run its level0 on the mesh engine: this
// rank's node (level0 group) is exactly the ranks that share its segment,
// and GOHCCL_ALGO does not name a level0 schedule for coll.
// The mesh replaces ring or halving-doubling there because it moves the
// node's bytes through shared memory once instead of in 2(L-1) messages.
func (c *Comm) meshLevel0(coll tune.Coll) bool {
	l := c.local
	return l != nil && !l.whole && l.level0[coll]
}

// meshNode is the node's collectives on the mesh engine, for the level0
// legs of the hierarchical allgather and reduce-scatter (algo.Level0Node),
// under the communicator's running op.
type meshNode struct{ c *Comm }

func (m meshNode) AllGather(own, node []byte) error {
	return m.c.local.engine.AllGather(m.c.meshCall(&m.c.op), own, node)
}

func (m meshNode) ReduceScatter(node, out []byte) error {
	return m.c.local.engine.ReduceScatter(m.c.meshCall(&m.c.op), node, out)
}

// allReduceHierMesh is the hierarchical all-reduce with the mesh as level0:
// a reduce-scatter on the engine leaves local rank l with block l
// (pattern.Blocks(count, L, l)) reduced over the node, the level1 schedule
// all-reduces that block among the ranks holding block l on every node, and
// an allgather on the engine gives every local rank every block.
func (c *Comm) allReduceHierMesh(o *algo.Op, buf []byte, count int, level1 algo.AllReduceFunc) error {
	l := c.local
	if err := l.engine.ReduceScatterBlocks(c.meshCall(o), buf, count); err != nil {
		return err
	}
	off, n := pattern.Blocks(count, len(l.ranks), l.me)
	es := o.DType.Size()
	if v := o.View(c.hier.Cross, 0); v != nil && n > 0 && v.Size() > 1 {
		// The engine sends no frames, so the view's tags are the only
		// ones on the wire in this op: phase 0 is free.
		if err := level1(v, buf[off*es:(off+n)*es], n); err != nil {
			return err
		}
	}
	return l.engine.AllGatherBlocks(c.meshCall(o), buf, count)
}
