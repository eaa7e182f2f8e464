package tune

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAlgoValid(t *testing.T) {
	hier := func(l0, l1 Algo) Choice { return Choice{Algo: Hier, Level0: l0, Level1: l1} }
	all := func(c Choice) (s Spec) {
		for i := range s.Per {
			s.Per[i] = c
		}
		return s
	}
	cases := map[string]Spec{
		"":                        {},
		"auto":                    {},
		" AUTO ":                  {},
		"ring":                    all(Choice{Algo: Ring}),
		"tree":                    all(Choice{Algo: Tree}),
		"dtree":                   all(Choice{Algo: DTree}),
		"rhd":                     all(Choice{Algo: RHD}),
		"level0:ring;level1:tree": all(hier(Ring, Tree)),
		"level1:rhd":              all(hier(Auto, RHD)),
		"level1:tree; level0:rhd": all(hier(RHD, Tree)),
	}
	per := Spec{}
	per.Per[AllReduce] = hier(Ring, RHD)
	per.Per[AllGather] = Choice{Algo: Ring}
	cases["allreduce=level0:ring;level1:rhd/allgather=ring"] = per
	mixed := all(Choice{Algo: Tree})
	mixed.Per[Broadcast] = Choice{Algo: Binomial}
	cases["tree/broadcast=binomial"] = mixed
	rs := Spec{}
	rs.Per[ReduceScatter] = Choice{Algo: Ring}
	cases["reduce_scatter=ring"] = rs
	for in, want := range cases {
		got, err := ParseAlgo(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

func TestParseAlgoInvalid(t *testing.T) {
	for _, in := range []string{"rings", "level2:ring", "level0:tree;level1:ring", "level0:ring;level0:rhd",
		"allreduce=binomial", "allgather=tree", "alltoall=ring", "ring/tree", "allreduce=ring/allreduce=tree",
		"level0", "ring/", "level1:binomial", "allreduce="} {
		_, err := ParseAlgo(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), "valid forms", in)
		assert.Contains(t, err.Error(), "GOHCCL_ALGO", in)
	}
}

// seedShape is the seed's cluster: nodes x 8 ranks, ranks of a node
// consecutive.
func seedShape(nodes, perNode int) Shape {
	return Shape{N: nodes * perNode, Nodes: nodes, PerNode: perNode, Consecutive: true}
}

// hccsRoce is the seed's hardware: HCCS inside a node, 100 Gb/s RoCE across.
func hccsRoce() Model {
	m := DefaultModel()
	m.Intra = Link{Latency: 2e-6, Bandwidth: 392e9}
	m.Inter = Link{Latency: 10e-6, Bandwidth: 12.5e9}
	return m
}

// TestSeedRules checks the rules of the seed where the model reproduces
// them: ring inside one node, log-step schedules as ranks grow for small
// messages, hierarchical across nodes.
func TestSeedRules(t *testing.T) {
	for _, m := range []Model{DefaultModel(), hccsRoce()} {
		for _, n := range []int{2, 3, 4, 8} {
			for _, b := range []float64{64 << 20, 1 << 30} {
				c := Best(m.Price(AllReduce, seedShape(1, n), b))
				assert.Equal(t, Ring, c.Algo, "one node of %d ranks, %g bytes", n, b)
			}
		}
		for _, n := range []int{16, 64, 256} {
			c := Best(m.Price(AllReduce, seedShape(1, n), 4<<10))
			assert.Contains(t, []Algo{Tree, DTree, RHD}, c.Algo, "%d ranks, 4 KiB: %s", n, c)
		}
		for _, nodes := range []int{2, 4, 16} {
			c := Best(m.Price(AllReduce, seedShape(nodes, 8), 1<<30))
			assert.Equal(t, Hier, c.Algo, "%d nodes x 8, 1 GiB: %s", nodes, c)
		}
	}
}

func TestTunerFallbackWarnsOnce(t *testing.T) {
	spec, err := ParseAlgo("level0:ring;level1:tree")
	require.NoError(t, err)
	var warnings, tables []string
	tu := New(spec, DefaultModel(), Shape{N: 5, Nodes: 2, PerNode: 0})
	tu.Warnf = func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) }
	tu.Logf = func(f string, a ...any) { tables = append(tables, fmt.Sprintf(f, a...)) }
	for _, b := range []int{100, 100, 1 << 20, 1 << 21} {
		c := tu.Choose(AllReduce, b)
		assert.NotEqual(t, Hier, c.Algo)
	}
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "same number of ranks")
	assert.Len(t, tables, 3, "one table per size class")
	assert.Contains(t, tables[0], "ring")
	assert.Contains(t, tables[0], "->")

	// A bare form a collective lacks falls back for that collective only.
	spec, _ = ParseAlgo("dtree")
	tu = New(spec, DefaultModel(), Shape{N: 8, Nodes: 1, PerNode: 8})
	assert.Equal(t, DTree, tu.Choose(AllReduce, 1<<20).Algo)
	assert.Equal(t, DTree, tu.Choose(Broadcast, 1<<20).Algo)
	assert.Contains(t, []Algo{Ring, RHD}, tu.Choose(AllGather, 1<<20).Algo)
	spec, _ = ParseAlgo("allgather=rhd")
	tu = New(spec, DefaultModel(), Shape{N: 6, Nodes: 1, PerNode: 6})
	assert.Equal(t, Ring, tu.Choose(AllGather, 1<<20).Algo)
}

func TestForcedHierFillsLevels(t *testing.T) {
	spec, _ := ParseAlgo("level1:tree")
	tu := New(spec, DefaultModel(), seedShape(4, 8))
	c := tu.Choose(AllReduce, 1<<20)
	assert.Equal(t, Hier, c.Algo)
	assert.Equal(t, Tree, c.Level1)
	assert.NotEqual(t, Auto, c.Level0)
}

func TestCostClosedForms(t *testing.T) {
	m := DefaultModel()
	s := Shape{N: 8, Nodes: 1, PerNode: 8, Consecutive: true, Bytes: 8 << 20} // one segment per ring step
	l := m.Intra
	ring := 14*l.Latency + 2*7.0/8*s.Bytes/l.Bandwidth + 7.0/8*s.Bytes/m.ReduceBW
	assert.InDelta(t, ring, m.Cost(AllReduce, Choice{Algo: Ring}, s), 1e-12)
	rhd := 2*(4+2+1)*l.Latency + 2*7.0/8*s.Bytes/l.Bandwidth + 7.0/8*s.Bytes/m.ReduceBW // 4, 2, 1 segments per step
	assert.InDelta(t, rhd, m.Cost(AllReduce, Choice{Algo: RHD}, s), 1e-12)
}
