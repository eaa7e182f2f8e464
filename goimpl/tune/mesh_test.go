package tune

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mesh parses for every collective; when it reaches the tuner (ranks that
// do not share one host's memory) it falls back with one warning.
func TestMeshParsesAndFallsBack(t *testing.T) {
	spec, err := ParseAlgo("mesh")
	require.NoError(t, err)
	for c := range spec.Per {
		assert.Equal(t, Mesh, spec.Per[c].Algo, Coll(c).String())
	}
	spec, err = ParseAlgo("allreduce=mesh/allgather=ring")
	require.NoError(t, err)
	assert.Equal(t, Mesh, spec.Per[AllReduce].Algo)
	assert.Equal(t, Ring, spec.Per[AllGather].Algo)

	var warnings []string
	tu := New(spec, DefaultModel(), Shape{N: 8, Nodes: 2, PerNode: 4, Consecutive: true})
	tu.Warnf = func(f string, a ...any) { warnings = append(warnings, f) }
	for _, b := range []int{4 << 10, 1 << 20, 64 << 20} {
		assert.NotEqual(t, Mesh, tu.Choose(AllReduce, b).Algo)
	}
	assert.Len(t, warnings, 1)
	for _, c := range Candidates(AllReduce, Shape{N: 4, Nodes: 1, PerNode: 4}) {
		assert.NotEqual(t, Mesh, c.Algo, "mesh is never priced")
	}
}
