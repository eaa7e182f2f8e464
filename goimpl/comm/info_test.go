package comm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/transport/inproc"
)

// TestInfo checks the description python -m gohccl.info prints under
// torchrun: the nodes the hosts make, a link per rank, and the tuner's line
// for every tuned collective at every size, naming the topology and the
// GOHCCL_ALGO restriction.
func TestInfo(t *testing.T) {
	n := 5
	hosts := []string{"a", "a", "a", "b", "b"}
	meshes := inproc.NewWorld(n)
	cfg := smallBuffers()
	cfg.Algo = "ring"
	comms := make([]*Comm, n)
	for r := range comms {
		c, err := FromMesh(meshes[r], Options{Rank: r, Size: n, Config: cfg, Hosts: hosts})
		require.NoError(t, err)
		defer c.Close()
		comms[r] = c
	}
	in := comms[3].Info()
	assert.Equal(t, 3, in.Rank)
	assert.Equal(t, 5, in.Size)
	assert.Equal(t, "b", in.Host)
	assert.Equal(t, "2 nodes (3+2 ranks)", in.Topology)
	assert.Equal(t, [][]int{{0, 1, 2}, {3, 4}}, in.Nodes)
	require.Len(t, in.Links, n)
	assert.Equal(t, "self", in.Links[3])
	for p, l := range in.Links {
		if p != 3 {
			assert.Equal(t, meshes[3].LinkTo(p).Class(), l)
		}
	}
	assert.Equal(t, "ring", in.Algo)
	require.Len(t, in.Table, 5*len(InfoSizes))
	for i, coll := range []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter"} {
		line := in.Table[i*len(InfoSizes)]
		assert.True(t, strings.HasPrefix(line, coll+" [4KiB, 8KiB) on 5 ranks (2 nodes)"), line)
		assert.Contains(t, line, " -> ")
	}
	// The ring restriction holds for all-reduce, which has a ring row.
	assert.Contains(t, in.Table[0], "-> ring")
}
