package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/sim"
	"github.com/gohccl/gohccl/goimpl/tune"
)

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	rc := Main("gohccl-sim", args, &out, &errOut)
	return rc, out.String(), errOut.String()
}

// TestTable checks the table's header, one row per named algorithm with
// the simulator's own time for it, and the tuner's line.
func TestTable(t *testing.T) {
	rc, out, errOut := runCLI("-nodes", "2", "-per-node", "3", "-bytes", "64K", "-algos", "ring,rhd")
	require.Equal(t, 0, rc, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	assert.Equal(t, "# allreduce of 64K on 2 nodes x 3 ranks; intra 392 GB/s 2 us, inter 12.5 GB/s 10 us, reduce 200 GB/s, segment 4M", lines[0])
	assert.True(t, strings.HasPrefix(lines[2], "ring"), lines[2])
	assert.True(t, strings.HasPrefix(lines[3], "rhd"), lines[3])
	assert.True(t, strings.HasPrefix(lines[4], "tuner's choice: "), lines[4])
}

// TestJSON checks -json against the simulator run directly: the ring row's
// simulated time is sim.Run's for the same network and choice.
func TestJSON(t *testing.T) {
	rc, out, errOut := runCLI("-nodes", "1", "-per-node", "4", "-bytes", "1M", "-algos", "ring", "-json")
	require.Equal(t, 0, rc, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	var row struct {
		Algorithm string  `json:"algorithm"`
		SimS      float64 `json:"sim_s"`
		Bytes     int     `json:"bytes"`
		Coll      string  `json:"coll"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &row))
	assert.Equal(t, "allreduce", row.Coll)
	assert.Equal(t, 1<<20, row.Bytes)
	require.True(t, strings.HasPrefix(row.Algorithm, "ring"), row.Algorithm)

	net := sim.Net{Ranks: 4, PerNode: 4, Intra: tune.Link{Latency: 2e-6, Bandwidth: 392e9},
		Inter: tune.Link{Latency: 10e-6, Bandwidth: 12.5e9}, ReduceBW: 200e9, Segment: 4 << 20}
	m := tune.Model{Intra: net.Intra, Inter: net.Inter, ReduceBW: net.ReduceBW, Segment: net.Segment}
	spec, err := tune.ParseAlgo("ring")
	require.NoError(t, err)
	var ring tune.Choice
	for _, p := range tune.Collapse(m.Price(tune.AllReduce, tune.Shape{N: 4, Nodes: 1, PerNode: 4, Consecutive: true}, 1<<20, spec.Per[tune.AllReduce])) {
		if p.Choice.String() == row.Algorithm {
			ring = p.Choice
		}
	}
	require.NotNil(t, ring.Row, "no priced choice named %s", row.Algorithm)
	want, err := sim.Run(net, tune.AllReduce, ring, 1<<20)
	require.NoError(t, err)
	assert.InEpsilon(t, want, row.SimS, 1e-9)
	assert.Contains(t, lines[1], `"tuner":`)
}

// TestBadOptions checks that bad input exits 2 with the problem named.
func TestBadOptions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-coll", "gossip"}, `-coll "gossip"`},
		{[]string{"-bytes", "lots"}, `"lots" is not a byte count`},
		{[]string{"-nodes", "0"}, "must be at least 1"},
		{[]string{"-algos", "zigzag"}, "zigzag"},
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		rc, out, errOut := runCLI(c.args...)
		assert.Equal(t, 2, rc, "%v", c.args)
		assert.Empty(t, out, "%v", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
	rc, _, errOut := runCLI("-h")
	assert.Equal(t, 0, rc)
	assert.Contains(t, errOut, "-per-node")
}
