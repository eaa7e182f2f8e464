package comm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// worldWith is world with a configuration of the caller's.
func worldWith(t *testing.T, n int, cfg config.Config, f func(c *Comm) error) []error {
	t.Helper()
	meshes := inproc.NewWorld(n)
	comms := make([]*Comm, n)
	for r := range comms {
		c, err := FromMesh(meshes[r], Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: cfg})
		require.NoError(t, err)
		comms[r] = c
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	return runAll(comms, f)
}

// TestForcedAlgorithms runs every collective under each GOHCCL_ALGO form,
// including ones a collective lacks (which fall back), and the hierarchical
// forms with GOHCCL_RANKS_PER_NODE.
func TestForcedAlgorithms(t *testing.T) {
	type setup struct {
		algo    string
		perNode int
	}
	setups := []setup{{"ring", 0}, {"tree", 0}, {"dtree", 0}, {"rhd", 0}, {"binomial", 0},
		{"level0:ring;level1:tree", 2}, {"level0:rhd;level1:dtree", 2}, {"level1:rhd", 3},
		{"allreduce=level0:ring;level1:ring/allgather=rhd/broadcast=dtree/reduce=tree", 2},
		{"level0:rhd;level1:rhd", 2}, {"allgather=level0:ring;level1:ring/reducescatter=level0:ring;level1:rhd", 3},
		{"allgather=level1:rhd/reducescatter=level0:rhd", 2}}
	for _, s := range setups {
		for _, n := range []int{3, 4, 6} {
			t.Run(fmt.Sprintf("%s/k%d/n%d", s.algo, s.perNode, n), func(t *testing.T) {
				cfg := smallBuffers()
				cfg.Algo, cfg.RanksPerNode = s.algo, s.perNode
				count := 9001
				inputs := make([][]int64, n)
				bufs := make([][]byte, n)
				for r := range bufs {
					inputs[r] = reftest.Ints(r, count, 21)
					bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
				}
				noErrors(t, worldWith(t, n, cfg, func(c *Comm) error {
					return c.AllReduce(bufs[c.Rank()], count, reduce.Int32, reduce.Sum, 0)
				}))
				for r := range bufs {
					require.Equal(t, reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs)), bufs[r], "allreduce rank %d", r)
					bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
				}
				root := n - 1
				noErrors(t, worldWith(t, n, cfg, func(c *Comm) error {
					if err := c.Reduce(bufs[c.Rank()], count, reduce.Int32, reduce.Max, root, 0); err != nil {
						return err
					}
					return c.Broadcast(bufs[c.Rank()], count, reduce.Int32, root, 0)
				}))
				for r := range bufs {
					require.Equal(t, reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Max, inputs)), bufs[r], "reduce+broadcast rank %d", r)
				}
				outs := make([][]byte, n)
				var want []byte
				for r := range outs {
					bufs[r] = reftest.Encode(reduce.Int32, inputs[r][:777])
					outs[r] = make([]byte, n*len(bufs[r]))
					want = append(want, bufs[r]...)
				}
				noErrors(t, worldWith(t, n, cfg, func(c *Comm) error {
					return c.AllGather(bufs[c.Rank()], outs[c.Rank()], 777, reduce.Int32, 0)
				}))
				for r := range outs {
					require.Equal(t, want, outs[r], "allgather rank %d", r)
				}
				ins := make([][]int64, n)
				for r := range outs {
					ins[r] = reftest.Ints(r, n*777, 22)
					bufs[r] = reftest.Encode(reduce.Int32, ins[r])
					outs[r] = make([]byte, 4*777)
				}
				noErrors(t, worldWith(t, n, cfg, func(c *Comm) error {
					return c.ReduceScatter(bufs[c.Rank()], outs[c.Rank()], 777, reduce.Int32, reduce.Sum, 0)
				}))
				sum := reftest.Reduce(reduce.Sum, ins)
				for r := range outs {
					require.Equal(t, reftest.Encode(reduce.Int32, sum[r*777:(r+1)*777]), outs[r], "reduce_scatter rank %d", r)
				}
			})
		}
	}
}

func TestBadAlgoRefusedAtInit(t *testing.T) {
	cfg := smallBuffers()
	cfg.Algo = "level0:tree"
	_, err := FromMesh(inproc.NewWorld(1)[0], Options{Rank: 0, Size: 1, Config: cfg})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "valid forms")
}

// TestTopologyFromHosts checks that host identities become nodes and that
// the hierarchical all-reduce runs on them.
func TestTopologyFromHosts(t *testing.T) {
	n := 6
	hosts := []string{"a", "a", "a", "b", "b", "b"}
	meshes := inproc.NewWorld(n)
	comms := make([]*Comm, n)
	cfg := smallBuffers()
	cfg.Algo = "level0:ring;level1:rhd"
	for r := range comms {
		c, err := FromMesh(meshes[r], Options{Rank: r, Size: n, Config: cfg, Hosts: hosts})
		require.NoError(t, err)
		defer c.Close()
		comms[r] = c
	}
	assert.Equal(t, "2 nodes x 3 ranks", comms[0].topo.String())
	assert.Equal(t, []int{1, 4}, comms[4].x.Hier.Cross)
	count := 3001
	inputs := make([][]int64, n)
	bufs := make([][]byte, n)
	for r := range bufs {
		inputs[r] = reftest.Ints(r, count, 23)
		bufs[r] = reftest.Encode(reduce.Int64, inputs[r])
	}
	noErrors(t, runAll(comms, func(c *Comm) error {
		return c.AllReduce(bufs[c.Rank()], count, reduce.Int64, reduce.Sum, 0)
	}))
	for r := range bufs {
		require.Equal(t, reftest.Encode(reduce.Int64, reftest.Reduce(reduce.Sum, inputs)), bufs[r])
	}
}

// TestVectorHierOnDealtHosts runs the hierarchical allgather and
// reduce-scatter on hosts that hold every other rank, so a node's ranks are
// not consecutive and a slice's blocks are spread out, and checks that the
// tuner really chose the forced forms.
func TestVectorHierOnDealtHosts(t *testing.T) {
	n := 6
	hosts := []string{"a", "b", "a", "b", "a", "b"}
	meshes := inproc.NewWorld(n)
	comms := make([]*Comm, n)
	cfg := smallBuffers()
	cfg.Algo = "allgather=level0:ring;level1:ring/reducescatter=level0:ring;level1:rhd"
	for r := range comms {
		c, err := FromMesh(meshes[r], Options{Rank: r, Size: n, Config: cfg, Hosts: hosts})
		require.NoError(t, err)
		defer c.Close()
		comms[r] = c
	}
	require.Equal(t, "2 nodes x 3 ranks", comms[0].topo.String())
	for _, count := range []int{1, 5, 40001} {
		bytes := 8 * count * n
		assert.Equal(t, "level0:ring;level1:ring", comms[0].tuner.Choose(tune.AllGather, bytes).Name())
		assert.Equal(t, "level0:ring;level1:rhd", comms[0].tuner.Choose(tune.ReduceScatter, bytes).Name())
		ins := make([][]int64, n)
		bufs := make([][]byte, n)
		outs := make([][]byte, n)
		var want []byte
		for r := range bufs {
			ins[r] = reftest.Ints(r, count, 24)
			bufs[r] = reftest.Encode(reduce.Int64, ins[r])
			want = append(want, bufs[r]...)
			outs[r] = make([]byte, n*len(bufs[r]))
		}
		noErrors(t, runAll(comms, func(c *Comm) error {
			return c.AllGather(bufs[c.Rank()], outs[c.Rank()], count, reduce.Int64, 0)
		}))
		for r := range outs {
			require.Equal(t, want, outs[r], "allgather count %d rank %d", count, r)
		}
		for r := range bufs {
			ins[r] = reftest.Ints(r, n*count, 25)
			bufs[r] = reftest.Encode(reduce.Int64, ins[r])
			outs[r] = make([]byte, 8*count)
		}
		noErrors(t, runAll(comms, func(c *Comm) error {
			return c.ReduceScatter(bufs[c.Rank()], outs[c.Rank()], count, reduce.Int64, reduce.Max, 0)
		}))
		top := reftest.Reduce(reduce.Max, ins)
		for r := range outs {
			require.Equal(t, reftest.Encode(reduce.Int64, top[r*count:(r+1)*count]), outs[r], "reduce_scatter count %d rank %d", count, r)
		}
	}
}
