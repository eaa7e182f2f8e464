package tune

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/mesh"
)

func TestParseAlgoValid(t *testing.T) {
	hier := func(l0, l1 string) Restriction { return Restriction{Name: levels, Level0: l0, Level1: l1} }
	all := func(r Restriction) (s Spec) {
		for i := range numTuned {
			s.Per[i] = r
		}
		return s
	}
	cases := map[string]Spec{
		"":                        {},
		"auto":                    {},
		" AUTO ":                  {},
		"ring":                    all(Restriction{Name: "ring"}),
		"tree":                    all(Restriction{Name: "tree"}),
		"dtree":                   all(Restriction{Name: "dtree"}),
		"rhd":                     all(Restriction{Name: "rhd"}),
		"mesh":                    all(Restriction{Name: "mesh"}),
		"mesh.twophase":           all(Restriction{Name: "mesh.twophase"}),
		"level0:ring;level1:tree": all(hier("ring", "tree")),
		"level1:rhd":              all(hier("", "rhd")),
		"level1:tree; level0:rhd": all(hier("rhd", "tree")),
		"level0:mesh;level1:rhd":  all(hier("mesh", "rhd")),
	}
	per := Spec{}
	per.Per[AllReduce] = hier("ring", "rhd")
	per.Per[AllGather] = Restriction{Name: "ring"}
	cases["allreduce=level0:ring;level1:rhd/allgather=ring"] = per
	mixed := all(Restriction{Name: "tree"})
	mixed.Per[Broadcast] = Restriction{Name: "binomial"}
	cases["tree/broadcast=binomial"] = mixed
	rs := Spec{}
	rs.Per[ReduceScatter] = Restriction{Name: "ring"}
	cases["reduce_scatter=ring"] = rs
	vec := Spec{}
	vec.Per[AllGather] = hier("ring", "rhd")
	vec.Per[ReduceScatter] = Restriction{Name: "rhd"}
	cases["allgather=level0:ring;level1:rhd/reducescatter=rhd"] = vec
	vec2 := Spec{}
	vec2.Per[ReduceScatter] = hier("rhd", "")
	cases["reducescatter=level0:rhd"] = vec2
	single := Spec{}
	single.Per[Barrier] = Restriction{Name: "dissemination"}
	single.Per[AllGather] = Restriction{Name: "bruck"}
	cases["barrier=dissemination/allgather=bruck"] = single
	for in, want := range cases {
		got, err := ParseAlgo(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}

func TestParseAlgoInvalid(t *testing.T) {
	for _, in := range []string{"rings", "level2:ring", "level0:tree;level1:ring", "level0:ring;level0:rhd",
		"allreduce=binomial", "allgather=tree", "alltoall=ring", "ring/tree", "allreduce=ring/allreduce=tree",
		"level0", "ring/", "level1:binomial", "allreduce=", "levels", "mesh.fast", "reducescatter=mesh.singlecopy",
		"allgather=level0:ring;level1:tree", "reducescatter=level1:dtree", "reducescatter=binomial", "barrier=ring"} {
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

// TestTableRows checks every row the way a newcomer's row will be checked:
// a unique name, a description, the functions, a price that is positive
// where it runs and zero for one rank.
func TestTableRows(t *testing.T) {
	m := DefaultModel()
	m.Host = testFigures()
	for c := range NumColls {
		coll := Coll(c)
		seen := map[string]bool{}
		require.NotEmpty(t, Rows(coll), "%s has rows", coll)
		for _, r := range Rows(coll) {
			assert.False(t, seen[r.Name], "%s row %s twice", coll, r.Name)
			seen[r.Name] = true
			assert.NotEmpty(t, r.Desc, "%s %s", coll, r.Name)
			require.NotNil(t, r.CanRun, "%s %s", coll, r.Name)
			require.NotNil(t, r.Cost, "%s %s", coll, r.Name)
			require.NotNil(t, r.Run, "%s %s", coll, r.Name)
			assert.Equal(t, coll, r.Coll)
		}
		s := Shape{N: 4, Nodes: 2, PerNode: 2, Consecutive: true,
			Mesh: MeshShape{Whole: true, Ranks: 4, Chunk: 64 << 10}}
		for _, p := range m.Price(coll, s, 1<<20, Restriction{}) {
			if p.Err == nil {
				assert.Greater(t, p.Seconds, 0.0, "%s %s", coll, p.Choice)
			}
		}
	}
}

// TestSeedRules checks the rules of the seed where the model reproduces
// them: ring inside one node, log-step schedules as ranks grow for small
// messages, hierarchical across nodes.
func TestSeedRules(t *testing.T) {
	for _, m := range []Model{DefaultModel(), hccsRoce()} {
		for _, n := range []int{2, 3, 4, 8} {
			for _, b := range []float64{64 << 20, 1 << 30} {
				c := Best(m.Price(AllReduce, seedShape(1, n), b, Restriction{}))
				assert.Equal(t, "ring", c.Name(), "one node of %d ranks, %g bytes", n, b)
			}
		}
		for _, n := range []int{16, 64, 256} {
			c := Best(m.Price(AllReduce, seedShape(1, n), 4<<10, Restriction{}))
			assert.Contains(t, []string{"tree", "dtree", "rhd"}, c.Name(), "%d ranks, 4 KiB: %s", n, c)
		}
		for _, nodes := range []int{2, 4, 16} {
			c := Best(m.Price(AllReduce, seedShape(nodes, 8), 1<<30, Restriction{}))
			assert.Equal(t, Levels, c.Row.Place, "%d nodes x 8, 1 GiB: %s", nodes, c)
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
		assert.NotEqual(t, Levels, c.Row.Place)
	}
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "same number of ranks")
	assert.Len(t, tables, 3, "one table per size class")
	assert.Contains(t, tables[0], "ring")
	assert.Contains(t, tables[0], "->")

	// A bare form a collective lacks falls back for that collective only.
	spec, _ = ParseAlgo("dtree")
	tu = New(spec, DefaultModel(), Shape{N: 8, Nodes: 1, PerNode: 8})
	assert.Equal(t, "dtree", tu.Choose(AllReduce, 1<<20).Name())
	assert.Equal(t, "dtree", tu.Choose(Broadcast, 1<<20).Name())
	assert.Contains(t, []string{"ring", "rhd", "bruck"}, tu.Choose(AllGather, 1<<20).Name())
	spec, _ = ParseAlgo("allgather=rhd")
	tu = New(spec, DefaultModel(), Shape{N: 6, Nodes: 1, PerNode: 6})
	assert.NotEqual(t, "rhd", tu.Choose(AllGather, 1<<20).Name())
}

func TestForcedHierFillsLevels(t *testing.T) {
	spec, _ := ParseAlgo("level1:tree")
	tu := New(spec, DefaultModel(), seedShape(4, 8))
	c := tu.Choose(AllReduce, 1<<20)
	assert.Equal(t, Levels, c.Row.Place)
	assert.Equal(t, "tree", c.Level1.Name)
	assert.NotNil(t, c.Level0)
}

func TestCostClosedForms(t *testing.T) {
	m := DefaultModel()
	s := Shape{N: 8, Nodes: 1, PerNode: 8, Consecutive: true, Bytes: 8 << 20} // one segment per ring step
	l := m.Intra
	named := func(form string) Choice {
		c, err := Named(AllReduce, form, 1<<20)
		require.NoError(t, err)
		return c
	}
	ring := 14*l.Latency + 2*7.0/8*s.Bytes/l.Bandwidth + 7.0/8*s.Bytes/m.ReduceBW
	assert.InDelta(t, ring, m.Cost(named("ring"), s), 1e-12)
	rhd := 2*(4+2+1)*l.Latency + 2*7.0/8*s.Bytes/l.Bandwidth + 7.0/8*s.Bytes/m.ReduceBW // 4, 2, 1 segments per step
	assert.InDelta(t, rhd, m.Cost(named("rhd"), s), 1e-12)
	// A quarter of the segment quadruples the ring's frames.
	c := named("ring")
	c.Segment = 256 << 10
	ring = 14*4*l.Latency + 2*7.0/8*s.Bytes/l.Bandwidth + 7.0/8*s.Bytes/m.ReduceBW
	assert.InDelta(t, ring, m.Cost(c, s), 1e-12)
}

// TestSegmentAxis checks that the segment is an axis of the table: a deep
// chain of a large message pipelines better in small segments, a small
// message takes the largest (one frame per step).
func TestSegmentAxis(t *testing.T) {
	m := hccsRoce()
	s := seedShape(1, 32)
	spec, _ := ParseAlgo("broadcast=ring")
	tu := New(spec, m, s)
	small, large := tu.Choose(Broadcast, 4<<10), tu.Choose(Broadcast, 256<<20)
	assert.Equal(t, m.Segment, small.Segment, "one frame per step: %s", small)
	assert.Less(t, large.Segment, m.Segment, "the 31-deep chain pipelines in smaller segments: %s", large)
}

// TestVectorCandidates checks the allgather and reduce-scatter tables: the
// hierarchical forms appear across nodes with level1 ring or rhd only, what
// cannot run says why, and the seed's cluster picks a hierarchical form for
// large messages.
func TestVectorCandidates(t *testing.T) {
	m := hccsRoce()
	for _, coll := range []Coll{AllGather, ReduceScatter} {
		ps := Collapse(m.Price(coll, seedShape(4, 8), 1<<30, Restriction{}))
		var names []string
		for _, p := range ps {
			names = append(names, p.Choice.Name())
			if p.Choice.Row.Place == Node || p.Choice.Level0 != nil && p.Choice.Level0.Name == "mesh" {
				require.Error(t, p.Err, "%s %s runs only with shared memory", coll, p.Choice)
				continue
			}
			require.NoError(t, p.Err, "%s %s", coll, p.Choice)
			assert.Greater(t, p.Seconds, 0.0, "%s %s", coll, p.Choice)
		}
		want := []string{"mesh.oneshot", "ring", "rhd"}
		if coll == AllGather {
			want = []string{"mesh.oneshot", "mesh.singlecopy", "ring", "rhd", "bruck"}
		}
		want = append(want, "level0:ring;level1:ring", "level0:ring;level1:rhd", "level0:rhd;level1:ring",
			"level0:rhd;level1:rhd", "level0:mesh;level1:ring", "level0:mesh;level1:rhd")
		assert.Equal(t, want, names, "%s", coll)
		assert.Equal(t, Levels, Best(ps).Row.Place, "%s 1 GiB on 4 x 8", coll)
		for _, c := range m.Candidates(coll, seedShape(1, 8), Restriction{}) {
			assert.NotEqual(t, Levels, c.Row.Place, "no hierarchical form on one node")
		}
	}
	// 3 nodes of 6: level0 rhd needs a power-of-two node size, the
	// allgather's level1 doubling a power-of-two number of nodes.
	s := seedShape(3, 6)
	s.Bytes = 1 << 20
	choice := func(coll Coll, form string) Choice {
		c, err := Named(coll, form, 1<<20)
		require.NoError(t, err)
		return c
	}
	assert.ErrorContains(t, choice(AllGather, "level0:ring;level1:rhd").CanRun(s), "power-of-two group")
	assert.NoError(t, choice(ReduceScatter, "level0:ring;level1:rhd").CanRun(s))
	assert.ErrorContains(t, choice(ReduceScatter, "level0:rhd;level1:ring").CanRun(s), "power-of-two node size")
	_, err := Named(AllGather, "level0:ring;level1:tree", 0)
	assert.ErrorContains(t, err, "level1 runs ring or rhd, not tree")
	assert.NoError(t, choice(ReduceScatter, "rhd").CanRun(Shape{N: 7, Nodes: 1, PerNode: 7}), "halving folds any group")
}

// TestVectorCostClosedForms checks the prices against their formulas on
// one link class: the folded halving reduce-scatter, and the hierarchical
// forms as the sum of their levels.
func TestVectorCostClosedForms(t *testing.T) {
	m := DefaultModel()
	l := m.Intra
	S := float64(6 << 20)
	s := Shape{N: 6, Nodes: 1, PerNode: 6, Consecutive: true, Bytes: S}
	choice := func(coll Coll, form string) Choice {
		c, err := Named(coll, form, 64<<20) // one frame per step
		require.NoError(t, err)
		return c
	}
	// p = 4, 2 folded pairs, virtual blocks of 2, 2, 1, 1 ranks' blocks:
	// halving steps whose larger halves are 4 and 2 of the 6 blocks, the
	// fold of S (reduced as it streams, slower to send than to reduce
	// here), one block back.
	want := 2*l.Latency + (S*4/6+S*2/6)*(1/l.Bandwidth+1/m.ReduceBW) + 2*l.Latency + S/l.Bandwidth + S/6/l.Bandwidth
	assert.InDelta(t, want, m.Cost(choice(ReduceScatter, "rhd"), s), 1e-12)

	h := Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true, Bytes: S}
	i, x := m.Intra, m.Inter
	// allgather: a 2-rank ring across nodes of the S/4 slice, then a 4-rank
	// ring inside of S.
	want = (x.Latency + S/4/2/x.Bandwidth) + (3*i.Latency + 3.0/4*S/i.Bandwidth)
	assert.InDelta(t, want, m.Cost(choice(AllGather, "level0:ring;level1:ring"), h), 1e-12)
	// reduce-scatter: the same legs reversed, each reducing what it receives.
	want = (3*i.Latency + 3.0/4*S*(1/i.Bandwidth+1/m.ReduceBW)) + (x.Latency + S/4/2*(1/x.Bandwidth+1/m.ReduceBW))
	assert.InDelta(t, want, m.Cost(choice(ReduceScatter, "level0:ring;level1:ring"), h), 1e-12)
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
	assert.Equal(t, "level0:ring;level1:tree", tu.Choose(AllReduce, 1<<20).Name())
	if c := tu.Choose(AllGather, 1<<20); c.Level1 != nil {
		assert.NotEqual(t, "tree", c.Level1.Name)
	}
	require.Len(t, warnings, 1)
	assert.Contains(t, warnings[0], "allgather")

	spec, _ = ParseAlgo("reducescatter=level0:rhd")
	tu = New(spec, DefaultModel(), seedShape(2, 4))
	c := tu.Choose(ReduceScatter, 1<<20)
	assert.Equal(t, Levels, c.Row.Place)
	assert.Equal(t, "rhd", c.Level0.Name)
	assert.Contains(t, []string{"ring", "rhd"}, c.Level1.Name, "level1 filled from the reduce-scatter's own")
}

// testFigures are a host's figures in the range seen on the machines of
// docs/mesh.md: a 0.4 us hand-off, copies at 40 GB/s in L2 falling to
// 8 GB/s beyond the caches, the kernel's copy a little slower, a core
// reading another's fresh lines at 8 GB/s, 2 MiB of L2.
func testFigures() mesh.Figures {
	return mesh.Figures{HandOff: 0.4e-6, Syscall: 0.8e-6, Cross: 8e9, L2: 2 << 20,
		Sizes:  []float64{256 << 10, 2 << 20, 8 << 20, 32 << 20},
		Copy:   []float64{40e9, 20e9, 14e9, 8e9},
		Kernel: []float64{25e9, 16e9, 12e9, 5e9}}
}

// fourRanks returns the shape of 4 ranks sharing one engine with a core
// each, and the same ranks on 2 cores (crowded).
func fourRanks() (four, crowded Shape) {
	four = Shape{N: 4, Nodes: 1, PerNode: 4, Consecutive: true, Mesh: MeshShape{Whole: true, Ranks: 4, Chunk: 64 << 10}}
	crowded = four
	crowded.Mesh.Share = 2
	return four, crowded
}

// allReducePrice returns m's price of the all-reduce row name on s moving
// b bytes.
func allReducePrice(t *testing.T, m Model, s Shape, b float64, name string) float64 {
	t.Helper()
	for _, p := range m.Price(AllReduce, s, b, Restriction{}) {
		if p.Choice.Name() == name {
			return p.Seconds
		}
	}
	t.Fatalf("no row %s at %v bytes", name, b)
	return 0
}

// TestMeshRows checks the engine's rows in the table: they run only where
// every rank shares one engine (and single copy only for two ranks that may
// read each other), GOHCCL_ALGO=mesh restricts the choice to them, a row
// name forces one, and level0:mesh composes the hierarchical rows with the
// engine's legs.
func TestMeshRows(t *testing.T) {
	m := DefaultModel()
	m.Host = testFigures()
	off := Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true}
	for _, p := range m.Price(AllReduce, off, 1<<20, Restriction{}) {
		if p.Choice.Row.Place == Node {
			assert.ErrorContains(t, p.Err, "one host", p.Choice.String())
		}
	}
	two := Shape{N: 2, Nodes: 1, PerNode: 2, Consecutive: true, Mesh: MeshShape{Whole: true, Ranks: 2, Chunk: 64 << 10}}
	spec, err := ParseAlgo("mesh")
	require.NoError(t, err)
	tu := New(spec, m, two)
	for _, b := range []int{4 << 10, 1 << 20, 64 << 20} {
		c := tu.Choose(AllReduce, b)
		assert.Equal(t, "mesh", c.Row.Family, "%d bytes: %s", b, c)
		assert.NotEqual(t, "mesh.singlecopy", c.Name(), "no cross-memory attach: never single copy")
	}
	two.Mesh.SingleCopy = true
	auto := New(Spec{}, m, two)
	assert.Equal(t, "mesh.oneshot", auto.Choose(AllReduce, 4<<10).Name(), "4 KiB: one wait")
	assert.Equal(t, "mesh.oneshot", auto.Choose(AllReduce, 64<<10).Name(), "64 KiB: one wait")
	spec, _ = ParseAlgo("allreduce=mesh.twophase")
	assert.Equal(t, "mesh.twophase", New(spec, m, two).Choose(AllReduce, 64<<10).Name())
	// Ranks that share cores take turns at the copies: the one-shot's
	// (n-1)S of reads cost the more, the waits no more.
	four, crowded := fourRanks()
	price := func(s Shape, b float64, name string) float64 { return allReducePrice(t, m, s, b, name) }
	for _, b := range []float64{4 << 10, 16 << 20} {
		for _, v := range []string{"mesh.oneshot", "mesh.twophase"} {
			alone, shared := price(four, b, v), price(crowded, b, v)
			assert.Greater(t, shared, alone, "%s at %v bytes", v, b)
			assert.Less(t, shared, 2*alone, "%s at %v bytes: the waits are not doubled", v, b)
		}
	}
	spec, _ = ParseAlgo("mesh")
	assert.Equal(t, "mesh.twophase", New(spec, m, crowded).Choose(AllReduce, 16<<20).Name(), "16 MiB, 4 ranks on 2 cores")
	three := two
	three.N, three.PerNode, three.Mesh.Ranks = 3, 3, 3
	for _, p := range m.Price(AllReduce, three, 16<<20, Restriction{}) {
		if p.Choice.Name() == "mesh.singlecopy" {
			assert.ErrorContains(t, p.Err, "two ranks")
		}
	}
	// level0:mesh across two hosts of four ranks each.
	hosts := Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true, Mesh: MeshShape{Level0: true, Ranks: 4, Chunk: 64 << 10}}
	spec, _ = ParseAlgo("level0:mesh;level1:rhd")
	c := New(spec, m, hosts).Choose(AllReduce, 16<<20)
	assert.Equal(t, "level0:mesh;level1:rhd", c.Name())
	assert.Greater(t, m.Cost(c, Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true, Mesh: hosts.Mesh, Bytes: 16 << 20}), 0.0)
}

// TestLoadedHostKeepsEngine checks that a hand-off measured while the host
// was busy (a scheduler slice, as three ranks and three busy threads on 2
// cores gave) raises the links' prices with the engine's: a frame over a
// link wakes two goroutines where a post to the engine wakes one, so the
// engine's rows stay the model's choice on one host.
func TestLoadedHostKeepsEngine(t *testing.T) {
	// The engine's default chunk up to 1 MiB; the 4 KiB chunk of a
	// 16 KiB GOHCCL_BUFFSIZE (goimpl/comm's TestMeasuredChoice) at the
	// 24 KiB that test runs.
	for _, chunk := range []struct{ bytes, upTo int }{{64 << 10, 1 << 20}, {4 << 10, 24 << 10}} {
		three := Shape{N: 3, Nodes: 1, PerNode: 3, Consecutive: true, Mesh: MeshShape{Whole: true, Ranks: 3, Chunk: chunk.bytes, Share: 1.5}}
		for _, handOff := range []float64{0.4e-6, 15e-6, 170e-6, 2e-3} {
			f := testFigures()
			f.HandOff = handOff
			m := DefaultModel().WithHost(f)
			assert.GreaterOrEqual(t, m.Intra.Latency, LinkHandOffs*handOff)
			assert.GreaterOrEqual(t, m.Intra.Latency, DefaultModel().Intra.Latency, "never under the configured latency")
			tu := New(Spec{}, m, three)
			for _, coll := range []Coll{AllReduce, Broadcast, AllGather, ReduceScatter} {
				for _, b := range []int{4 << 10, 24 << 10, 1 << 20} {
					if b > chunk.upTo {
						continue
					}
					c := tu.Choose(coll, b)
					assert.Equal(t, Node, c.Row.Place, "chunk %d, hand-off %gs, %s of %d bytes: %s\n%s", chunk.bytes, handOff, coll, b, c, tu.Table(coll, b))
				}
			}
		}
	}
	bare := DefaultModel().WithHost(mesh.Figures{})
	assert.Equal(t, DefaultModel().Intra, bare.Intra, "no figures (no shared memory): the links keep their own")
}

// TestCrowdedLaterWaits checks how the engine's waits are priced where
// ranks share cores: the wait that begins a phase costs a hand-off, the
// later waits of a pipeline nothing (a peer runs on the waiting rank's
// core), so the all-reduce's choice between the one-shot and two-phase
// rows no longer follows the hand-off measured at init. Where every rank
// has a core each later wait still costs a hand-off.
func TestCrowdedLaterWaits(t *testing.T) {
	four, crowded := fourRanks()
	model := func(handOff float64) Model {
		f := testFigures()
		f.HandOff = handOff
		return DefaultModel().WithHost(f)
	}
	priced := func(h float64, s Shape, b float64, name string) float64 {
		return allReducePrice(t, model(h), s, b, name)
	}
	const lo, hi = 3e-6, 30e-6
	const b = 16 << 20
	chunks := float64(b / (64 << 10))
	for _, v := range []struct {
		name           string
		alone, crowded float64 // hand-offs priced
	}{{"mesh.oneshot", 1 + (chunks-1)/aheadChunks, 1}, {"mesh.twophase", chunks + 1, 2}} {
		assert.InDelta(t, v.alone*(hi-lo), priced(hi, four, b, v.name)-priced(lo, four, b, v.name), 1e-9, "%s, a core each", v.name)
		assert.InDelta(t, v.crowded*(hi-lo), priced(hi, crowded, b, v.name)-priced(lo, crowded, b, v.name), 1e-9, "%s, crowded", v.name)
	}
	spec, err := ParseAlgo("mesh")
	require.NoError(t, err)
	for _, h := range []float64{lo, 10e-6, hi} {
		tu := New(spec, model(h), crowded)
		assert.Equal(t, "mesh.oneshot", tu.Choose(AllReduce, 4<<10).Name(), "4 KiB, hand-off %g", h)
		for _, b := range []int{1 << 20, 16 << 20} {
			assert.Equal(t, "mesh.twophase", tu.Choose(AllReduce, b).Name(), "%d bytes, hand-off %g\n%s", b, h, tu.Table(AllReduce, b))
		}
	}
}

// TestInfoTable checks the line GOHCCL_DEBUG=INFO prints: every row with
// its price (the engine's rows among them) and the choice.
func TestInfoTable(t *testing.T) {
	m := DefaultModel()
	m.Host = testFigures()
	s := Shape{N: 2, Nodes: 1, PerNode: 2, Consecutive: true, Mesh: MeshShape{Whole: true, Ranks: 2, SingleCopy: true, Chunk: 64 << 10}}
	tu := New(Spec{}, m, s)
	line := tu.Table(AllReduce, 1<<20)
	for _, want := range []string{"allreduce [1MiB, 2MiB) on 2 ranks", "ring/", "tree/", "mesh.oneshot ", "mesh.twophase ",
		"mesh.singlecopy ", "-> mesh."} {
		assert.Contains(t, line, want)
	}
	assert.False(t, strings.Contains(line, "level0:"), "no hierarchical form on one node: %s", line)
}

// TestTrialCandidates checks which rows a trial runs: on one host whose
// ranks share the engine, the engine's rows only (the links' frames are
// copied by goroutines whose time a trial does not see); without the
// engine, or across hosts, the links' rows too.
func TestTrialCandidates(t *testing.T) {
	m := DefaultModel()
	m.Host = testFigures()
	places := func(s Shape, coll Coll, bytes int) map[Place]int {
		tu := New(Spec{}, m, s)
		tu.SetMeasure(true)
		tu.Choose(coll, bytes)
		got := map[Place]int{}
		if tr := tu.trials[coll][SizeClass(bytes)]; tr != nil {
			for _, c := range tr.cands {
				got[c.Row.Place]++
			}
		}
		return got
	}
	one := Shape{N: 2, Nodes: 1, PerNode: 2, Consecutive: true, Mesh: MeshShape{Whole: true, Ranks: 2, Chunk: 64 << 10, SingleCopy: true}}
	for _, coll := range []Coll{AllReduce, Broadcast, AllGather} {
		for _, b := range []int{16 << 10, 1 << 20} {
			got := places(one, coll, b)
			assert.Zero(t, got[Links], "%s %d: no link row beside the engine: %v", coll, b, got)
			assert.GreaterOrEqual(t, got[Node], 2, "%s %d: the engine's rows: %v", coll, b, got)
		}
	}
	noEngine := Shape{N: 2, Nodes: 1, PerNode: 2, Consecutive: true}
	assert.Equal(t, map[Place]int{Links: trialPerPlace}, places(noEngine, AllReduce, 16<<10), "links only, trialPerPlace of them")
	hosts := Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true, Mesh: MeshShape{Level0: true, Ranks: 4, Chunk: 64 << 10}}
	got := places(hosts, AllReduce, 1<<20)
	assert.Positive(t, got[Links], "across hosts the links' rows are tried: %v", got)
	assert.Positive(t, got[Levels], "and the hierarchy's: %v", got)
}

// TestTrialRevisits runs a class through its trial and its revisits with
// synthetic times: the first trial falls in a slow stretch of the machine
// where the model's choice is slowest, and keeps another row; the first
// revisit, in the normal state, finds the model's choice fastest and keeps
// it (each candidate's smallest median over the trials); the second, in a
// slow stretch again, changes nothing; then the class is not measured
// again. Each revisit comes as many ops after the trial before as the
// schedule says: After (times Spacing each time) of the kept row's agreed
// time, at least MinTrials trials' worth.
func TestTrialRevisits(t *testing.T) {
	tu := New(Spec{}, DefaultModel(), Shape{N: 4, Nodes: 1, PerNode: 4})
	tu.SetMeasure(true)
	tu.Revisit = Revisit{After: time.Second, Spacing: 4, Times: 2, MinTrials: 2}
	const bytes = 16 << 20
	first := tu.Choose(AllReduce, bytes)
	tr := tu.trials[AllReduce][SizeClass(bytes)]
	require.NotNil(t, tr)
	trialOps := len(tr.times)
	require.GreaterOrEqual(t, len(tr.cands), 2)
	run := func(took func(i int) float64) Choice {
		t.Helper()
		for call := range trialOps {
			i := tr.order[call/tr.rounds]
			require.Equal(t, tr.cands[i], tu.Choose(AllReduce, bytes), "call %d", call)
			require.Equal(t, call == trialOps-1, tu.Observe(AllReduce, bytes, took(i)), "call %d", call)
		}
		return tu.Settle(AllReduce, bytes, tu.Timings(AllReduce, bytes))
	}
	// wait runs the kept row's ops up to the revisit: ops-1 of them leave
	// the class settled, the ops-th starts the trial.
	wait := func(kept Choice, ops int) {
		t.Helper()
		for op := 1; op <= ops; op++ {
			require.False(t, tu.Trying(AllReduce, bytes), "op %d of %d", op, ops)
			require.Equal(t, kept, tu.Choose(AllReduce, bytes))
			require.False(t, tu.Observe(AllReduce, bytes, 1e-3))
		}
		require.True(t, tu.Trying(AllReduce, bytes), "the revisit starts after %d ops", ops)
	}
	slow := func(i int) float64 { // the model's choice 10 ms, the others 5.5 ms and up
		if i == 0 {
			return 10e-3
		}
		return 5e-3 + float64(i)*0.5e-3
	}
	normal := func(i int) float64 { // the model's choice 2.4 ms, the others 4.5
		if i == 0 {
			return 2.4e-3
		}
		return 4.5e-3
	}
	kept := run(slow)
	require.Equal(t, tr.cands[1], kept, "the slow stretch keeps another row")
	wait(kept, max(181, 2*trialOps)) // 1 s over 5.5 ms
	require.Equal(t, first, run(normal), "the revisit keeps the model's choice: 2.4 ms against 4.5")
	wait(first, max(1666, 2*trialOps)) // 4 s over 2.4 ms
	require.Equal(t, first, run(slow), "a slow stretch in the last trial moves nothing: each row's best counts")
	for range 100 * trialOps {
		require.False(t, tu.Observe(AllReduce, bytes, 1e-3))
		require.False(t, tu.Trying(AllReduce, bytes), "after Times revisits, no more")
	}
	require.Equal(t, first, tu.Choose(AllReduce, bytes))

	// The schedule on its own: After over the op's time, at least
	// MinTrials trials, Spacing times longer each time, none after Times.
	r := Revisit{After: 2 * time.Second, Spacing: 8, Times: 2, MinTrials: 8}
	assert.Equal(t, 1000, r.opsUntil(1, 2e-3, 36), "2 s of 2 ms ops")
	assert.Equal(t, 8000, r.opsUntil(2, 2e-3, 36), "then 16 s")
	assert.Equal(t, 0, r.opsUntil(3, 2e-3, 36), "then none")
	assert.Equal(t, 8*36, r.opsUntil(1, 0.1, 36), "100 ms ops: 8 trials' worth, not 20 ops")
	assert.Equal(t, 8*36, r.opsUntil(1, 0, 36), "no time agreed: the floor")
	assert.Equal(t, 0, Revisit{}.opsUntil(1, 1e-3, 36), "Times 0: never")
}

// TestTrialKeepsTheFastest feeds a trial synthetic times: each candidate
// runs RoundsFor(bytes) ops in a row, the first is not counted and of the others the
// median counts (one slow run does not), and Settle keeps a row faster than
// the model's choice in every pass, or the earlier candidate when two are
// within Tie.
func TestTrialKeepsTheFastest(t *testing.T) {
	tu := New(Spec{}, DefaultModel(), Shape{N: 4, Nodes: 1, PerNode: 4})
	tu.SetMeasure(true)
	const bytes = 64 << 10
	first := tu.Choose(AllReduce, bytes)
	tr := tu.trials[AllReduce][SizeClass(bytes)]
	require.NotNil(t, tr)
	k := len(tr.cands)
	require.GreaterOrEqual(t, k, 2)
	require.Equal(t, first, tr.cands[0], "the model's choice runs first")
	slow := map[int]float64{}
	for i := range k {
		slow[i] = 1e-3
	}
	slow[k-1] = 2e-4 // the last candidate is fastest
	// Candidates run in three passes, the second in reverse order.
	require.Equal(t, 3, Passes)
	var order []int
	for p := range Passes {
		for i := range k {
			if p == 1 {
				i = k - 1 - i
			}
			order = append(order, i)
		}
	}
	R := tr.rounds
	require.Equal(t, SmallRounds, R, "64 KiB is a small class")
	calls := len(order) * R
	for call := range calls {
		j := call / R
		i := order[j]
		require.Equal(t, tr.cands[i], tu.Choose(AllReduce, bytes), "call %d runs candidate %d", call, i)
		took := slow[i]
		switch call {
		case (k - 1) * R:
			took = 5 // the switch to the fastest: not counted
		case (k-1)*R + 1:
			took = 1 // one very slow run of the fastest: the median ignores it
		}
		require.Equal(t, call == calls-1, tu.Observe(AllReduce, bytes, took))
	}
	nanos := tu.Timings(AllReduce, bytes)
	require.Len(t, nanos, Passes*k)
	for p := range Passes {
		require.Equal(t, int64(2e5), nanos[p*k+k-1], "pass %d", p)
		require.Equal(t, int64(1e6), nanos[p*k], "pass %d", p)
	}
	require.Equal(t, tr.cands[k-1], tu.Settle(AllReduce, bytes, nanos))
	require.Equal(t, tr.cands[k-1], tu.Choose(AllReduce, bytes), "kept")
	require.False(t, tu.Observe(AllReduce, bytes, 1), "a settled class is not measured")

	// A cold start: the first candidate's first pass is slow (the
	// communicator's first ops), its later passes the fastest of all. It
	// is kept: the median pass counts.
	tu = New(Spec{}, DefaultModel(), Shape{N: 4, Nodes: 1, PerNode: 4})
	tu.SetMeasure(true)
	tu.Choose(AllReduce, bytes)
	tr = tu.trials[AllReduce][SizeClass(bytes)]
	for call := range len(tr.order) * tr.rounds {
		i := tr.order[call/tr.rounds]
		require.Equal(t, tr.cands[i], tu.Choose(AllReduce, bytes))
		took := 2e-4
		if i == 0 {
			took = 1e-4
			if call < tr.rounds {
				took = 5e-3
			}
		}
		tu.Observe(AllReduce, bytes, took)
	}
	require.Equal(t, tr.cands[0], tu.Settle(AllReduce, bytes, tu.Timings(AllReduce, bytes)))

	// Within Tie of the fastest, the earlier candidate stays.
	tu = New(Spec{}, DefaultModel(), Shape{N: 4, Nodes: 1, PerNode: 4})
	tu.SetMeasure(true)
	tu.Choose(AllReduce, bytes)
	tr = tu.trials[AllReduce][SizeClass(bytes)]
	sums := make([]int64, Passes*len(tr.cands))
	for i := range sums {
		sums[i] = 1000
	}
	for p := range Passes {
		sums[p*len(tr.cands)+1] = 980
	}
	require.Equal(t, tr.cands[0], tu.Settle(AllReduce, bytes, sums))

	// Ops priced up to a few hundred microseconds run 16 in a row, longer
	// ones 4.
	assert.Equal(t, SmallRounds, RoundsFor(150e-6), "a 1 MiB all-reduce")
	assert.Equal(t, SmallRounds, RoundsFor(SmallTrial.Seconds()/SmallRounds))
	assert.Equal(t, Rounds, RoundsFor(2.5e-3), "a 16 MiB all-reduce")

	// Settle's rule on its own, 3 candidates, 3 passes (times[p*3+i]):
	// each candidate's median pass.
	for _, c := range []struct {
		name  string
		times []int64
		want  int
	}{
		{"a row much faster in one pass only does not replace the model's", []int64{670, 750, 700, 190, 120, 200, 200, 700, 210}, 0},
		{"a row slow in one pass only is still kept", []int64{670, 750, 700, 190, 120, 200, 200, 120, 210}, 1},
		{"the model's choice slow in its first pass only stays", []int64{5000, 300, 400, 200, 300, 400, 200, 300, 400}, 0},
		{"within Tie of the fastest, the earlier", []int64{1000, 300, 290, 1000, 300, 290, 1000, 300, 290}, 1},
	} {
		assert.Equal(t, c.want, fastest(medians(c.times, 3)), c.name)
	}

	// Measuring off: the model's choice at once, no trial.
	tu = New(Spec{}, DefaultModel(), Shape{N: 4, Nodes: 1, PerNode: 4})
	tu.Choose(AllReduce, bytes)
	require.Nil(t, tu.trials[AllReduce][SizeClass(bytes)])
}

// TestFormsNameEveryRow: the error for a malformed GOHCCL_ALGO lists every
// flat row and family of the table, from the table, so a new row needs no
// edit here.
func TestFormsNameEveryRow(t *testing.T) {
	text := forms()
	for c := range NumColls {
		for _, r := range Rows(c) {
			if r.Place != Levels {
				assert.Contains(t, text, r.Name, "%s's row", c)
				assert.Contains(t, text, r.Family, "%s's family", c)
			}
		}
	}
	assert.Contains(t, text, "mesh.eager")
	assert.NotContains(t, text, "levels,")
}
