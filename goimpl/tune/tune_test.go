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
	vec := Spec{}
	vec.Per[AllGather] = hier(Ring, RHD)
	vec.Per[ReduceScatter] = Choice{Algo: RHD}
	cases["allgather=level0:ring;level1:rhd/reducescatter=rhd"] = vec
	vec2 := Spec{}
	vec2.Per[ReduceScatter] = hier(RHD, Auto)
	cases["reducescatter=level0:rhd"] = vec2
	for in, want := range cases {
		got, err := ParseAlgo(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

func TestParseAlgoInvalid(t *testing.T) {
	for _, in := range []string{"rings", "level2:ring", "level0:tree;level1:ring", "level0:ring;level0:rhd",
		"allreduce=binomial", "allgather=tree", "alltoall=ring", "ring/tree", "allreduce=ring/allreduce=tree",
		"level0", "ring/", "level1:binomial", "allreduce=",
		"allgather=level0:ring;level1:tree", "reducescatter=level1:dtree", "reducescatter=binomial"} {
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

// TestVectorCandidates checks the allgather and reduce-scatter tables: the
// hierarchical forms appear across nodes with level1 ring or rhd only, what
// cannot run says why, and the seed's cluster picks a hierarchical form for
// large messages.
func TestVectorCandidates(t *testing.T) {
	m := hccsRoce()
	for _, coll := range []Coll{AllGather, ReduceScatter} {
		rows := m.Price(coll, seedShape(4, 8), 1<<30)
		var names []string
		for _, r := range rows {
			names = append(names, r.Choice.String())
			require.NoError(t, r.Err, "%s %s", coll, r.Choice)
			assert.Greater(t, r.Seconds, 0.0, "%s %s", coll, r.Choice)
		}
		assert.Equal(t, []string{"ring", "rhd", "level0:ring;level1:ring", "level0:ring;level1:rhd",
			"level0:rhd;level1:ring", "level0:rhd;level1:rhd"}, names, "%s", coll)
		assert.Equal(t, Hier, Best(rows).Algo, "%s 1 GiB on 4 x 8", coll)
		assert.Len(t, Candidates(coll, seedShape(1, 8)), 2, "no hierarchical form on one node")
	}
	// 3 nodes of 6: level0 rhd needs a power-of-two node size, the
	// allgather's level1 doubling a power-of-two number of nodes.
	s := seedShape(3, 6)
	s.Bytes = 1 << 20
	assert.ErrorContains(t, CanRun(AllGather, Choice{Algo: Hier, Level0: Ring, Level1: RHD}, s), "power-of-two number of nodes")
	assert.NoError(t, CanRun(ReduceScatter, Choice{Algo: Hier, Level0: Ring, Level1: RHD}, s))
	assert.ErrorContains(t, CanRun(ReduceScatter, Choice{Algo: Hier, Level0: RHD, Level1: Ring}, s), "power-of-two node size")
	assert.ErrorContains(t, CanRun(AllGather, Choice{Algo: Hier, Level0: Ring, Level1: Tree}, s), "level1 runs ring or rhd, not tree")
	assert.NoError(t, CanRun(ReduceScatter, Choice{Algo: RHD}, Shape{N: 7, Nodes: 1, PerNode: 7}), "halving folds any group")
}

// TestVectorCostClosedForms checks the new prices against their formulas on
// one link class: the folded halving reduce-scatter, and the hierarchical
// forms as the sum of their levels.
func TestVectorCostClosedForms(t *testing.T) {
	m := DefaultModel()
	m.Segment = 64 << 20 // one frame per step
	l := m.Intra
	S := float64(6 << 20)
	s := Shape{N: 6, Nodes: 1, PerNode: 6, Consecutive: true, Bytes: S}
	// p = 4, 2 folded pairs, virtual blocks of 2, 2, 1, 1 ranks' blocks:
	// halving steps whose larger halves are 4 and 2 of the 6 blocks, the
	// fold of S (reduced as it streams, slower to send than to reduce
	// here), one block back.
	want := 2*l.Latency + (S*4/6+S*2/6)*(1/l.Bandwidth+1/m.ReduceBW) + 2*l.Latency + S/l.Bandwidth + S/6/l.Bandwidth
	assert.InDelta(t, want, m.Cost(ReduceScatter, Choice{Algo: RHD}, s), 1e-12)

	h := Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true, Bytes: S}
	i, x := m.Intra, m.Inter
	// allgather: a 2-rank ring across nodes of the S/4 slice, then a 4-rank
	// ring inside of S.
	want = (x.Latency + S/4/2/x.Bandwidth) + (3*i.Latency + 3.0/4*S/i.Bandwidth)
	assert.InDelta(t, want, m.Cost(AllGather, Choice{Algo: Hier, Level0: Ring, Level1: Ring}, h), 1e-12)
	// reduce-scatter: the same legs reversed, each reducing what it receives.
	want = (3*i.Latency + 3.0/4*S*(1/i.Bandwidth+1/m.ReduceBW)) + (x.Latency + S/4/2*(1/x.Bandwidth+1/m.ReduceBW))
	assert.InDelta(t, want, m.Cost(ReduceScatter, Choice{Algo: Hier, Level0: Ring, Level1: Ring}, h), 1e-12)
}

// TestBareHierFallsBackForVectors checks that the seed's bare
// level0:ring;level1:tree, which the allgather cannot run (no tree at its
// level1), falls back there with a warning and still forces the all-reduce.
func TestBareHierFallsBackForVectors(t *testing.T) {
	spec, err := ParseAlgo("level0:ring;level1:tree")
	require.NoError(t, err)
	var warnings []string
	tu := New(spec, DefaultModel(), seedShape(2, 4))
	tu.Warnf = func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) }
	assert.Equal(t, Choice{Algo: Hier, Level0: Ring, Level1: Tree}, tu.Choose(AllReduce, 1<<20))
	assert.NotEqual(t, Tree, tu.Choose(AllGather, 1<<20).Level1)
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "allgather's level1 runs ring or rhd, not tree")

	spec, _ = ParseAlgo("reducescatter=level0:rhd")
	tu = New(spec, DefaultModel(), seedShape(2, 4))
	c := tu.Choose(ReduceScatter, 1<<20)
	assert.Equal(t, Hier, c.Algo)
	assert.Equal(t, RHD, c.Level0)
	assert.Contains(t, []Algo{Ring, RHD}, c.Level1, "level1 filled from the reduce-scatter's own")
}
