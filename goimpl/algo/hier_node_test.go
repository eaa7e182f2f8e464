package algo

import (
	"fmt"
	"testing"

	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/mesh"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/stretchr/testify/require"
)

// engineNode is a rank's NodeCollectives on a mesh engine over a heap
// region its node shares, as the communicator's are over /dev/shm.
type engineNode struct {
	e *mesh.Engine
	o *Op
}

func (n engineNode) call() *mesh.Call {
	return &mesh.Call{Stamp: n.o.Stamp, Deadline: n.o.Deadline, DType: n.o.DType, Kernel: n.o.Kernel, Kernel3: n.o.Kernel3}
}

func (n engineNode) AllGather(own, node []byte) error { return n.e.AllGather(n.call(), own, node) }

func (n engineNode) ReduceScatter(node, out []byte) error {
	return n.e.ReduceScatter(n.call(), node, out)
}

func (n engineNode) ReduceScatterBlocks(buf []byte, count int) error {
	return n.e.ReduceScatterBlocks(n.call(), buf, count)
}

func (n engineNode) AllGatherBlocks(buf []byte, count int) error {
	return n.e.AllGatherBlocks(n.call(), buf, count)
}

// withNodes gives each of ops (n ranks, nodes of k consecutive ranks) the
// mesh engine of its node.
func withNodes(t *testing.T, ops []*Op, k int) {
	t.Helper()
	for m := 0; m < len(ops)/k; m++ {
		region := make([]byte, mesh.RegionSize(k, mesh.MinBudget, mesh.Options{}))
		for l := range k {
			e, err := mesh.Attach(region, k, l, mesh.MinBudget, mesh.Options{})
			require.NoError(t, err)
			t.Cleanup(e.Close)
			o := ops[m*k+l]
			o.Node = engineNode{e, o}
		}
	}
}

// TestHierNodeLevel0 runs the hierarchical allgather and reduce-scatter
// with level0 on the nodes' mesh engines (Level0Node) against the
// references, for every level1 schedule, and refuses it where nodes do not
// hold consecutive ranks.
func TestHierNodeLevel0(t *testing.T) {
	for _, nk := range [][2]int{{4, 2}, {6, 3}, {6, 2}, {8, 2}, {8, 4}} {
		n, k := nk[0], nk[1]
		for _, l1 := range []Level1{Level1Ring, Level1RHD} {
			nodes := n / k
			for _, count := range []int{0, 1, 7, 1001, 20000} {
				name := fmt.Sprintf("n%d/k%d/level1:%s/%d", n, k, [...]string{"ring", "rhd"}[l1], count)
				t.Run("allgather/"+name, func(t *testing.T) {
					if l1 == Level1RHD && nodes&(nodes-1) != 0 {
						t.Skip("recursive doubling needs a power-of-two number of nodes")
					}
					ops := newOps(t, n, reduce.Int32, reduce.Sum, 1)
					withNodes(t, ops, k)
					want := []byte{}
					ins, outs := make([][]byte, n), make([][]byte, n)
					for r := range n {
						ins[r] = reftest.Encode(reduce.Int32, reftest.Ints(r, count, 7))
						want = append(want, ins[r]...)
						outs[r] = reftest.Encode(reduce.Int32, reftest.Ints(r+n, n*count, 8))
					}
					for r, err := range runRanks(ops, func(o *Op) error {
						r := o.Rank()
						return AllGatherHier(o, ins[r], outs[r], count, blocked(r, n, k), Level0Node, l1)
					}) {
						require.NoError(t, err, "rank %d", r)
						require.Equal(t, want, outs[r], "rank %d", r)
					}
				})
				t.Run("reducescatter/"+name, func(t *testing.T) {
					ops := newOps(t, n, reduce.Int32, reduce.Sum, 1)
					withNodes(t, ops, k)
					in := make([][]int64, n)
					ins, outs := make([][]byte, n), make([][]byte, n)
					for r := range n {
						in[r] = reftest.Ints(r, n*count, 9)
						ins[r] = reftest.Encode(reduce.Int32, in[r])
						outs[r] = make([]byte, 4*count)
					}
					want := reftest.Reduce(reduce.Sum, in)
					for r, err := range runRanks(ops, func(o *Op) error {
						r := o.Rank()
						return ReduceScatterHier(o, ins[r], outs[r], count, blocked(r, n, k), Level0Node, l1)
					}) {
						require.NoError(t, err, "rank %d", r)
						require.Equal(t, reftest.Encode(reduce.Int32, want[r*count:(r+1)*count]), outs[r], "rank %d", r)
						require.Equal(t, reftest.Encode(reduce.Int32, in[r]), ins[r], "rank %d: input modified", r)
					}
				})
			}
		}
	}
	t.Run("dealt refused", func(t *testing.T) {
		ops := newOps(t, 4, reduce.Int32, reduce.Sum, 1)
		withNodes(t, ops, 2)
		for _, err := range runRanks(ops, func(o *Op) error {
			return AllGatherHier(o, make([]byte, 4), make([]byte, 16), 1, dealt(o.Rank(), 4, 2), Level0Node, Level1Ring)
		}) {
			require.ErrorContains(t, err, "consecutive ranks")
		}
	})
}
