package config

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the README's variable table from the registry")

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	c := Default()
	assert.Equal(t, int64(8<<20), c.BuffSize)
	assert.Equal(t, Warn, c.Debug)
	assert.Equal(t, "auto", c.Algo)
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "512K": 512 << 10, "8M": 8 << 20, "1g": 1 << 30, "64KiB": 64 << 10, " 2MB ": 2 << 20} {
		got, err := ParseBytes(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "x", "-1", "1.5M", "12Q", "99999999999999999999"} {
		_, err := ParseBytes(bad)
		assert.Error(t, err, bad)
	}
}

func TestMalformedValuesNamed(t *testing.T) {
	for name, val := range map[string]string{"GOHCCL_BUFFSIZE": "lots", "GOHCCL_DEBUG": "LOUD", "GOHCCL_TRANSPORT": "carrier-pigeon"} {
		_, err := Load(env(map[string]string{name: val}))
		require.Error(t, err)
		assert.Contains(t, err.Error(), name)
	}
	_, err := Load(env(map[string]string{"GOHCCL_BUFFSIZE": "1K"}))
	assert.ErrorContains(t, err, "minimum")
	c, err := Load(env(map[string]string{"GOHCCL_BUFFSIZE": "16M", "GOHCCL_DEBUG": "info"}))
	require.NoError(t, err)
	assert.Equal(t, int64(16<<20), c.BuffSize)
	assert.Equal(t, Info, c.Debug)
}

const (
	tableBegin = "<!-- config-table:begin (go test ./goimpl/config -update) -->\n"
	tableEnd   = "<!-- config-table:end -->"
)

// TestReadmeTableIsCurrent keeps the README's table of variables generated
// from the registry; run with -update to rewrite it.
func TestReadmeTableIsCurrent(t *testing.T) {
	const path = "../../README.md"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(raw)
	i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
	require.True(t, i >= 0 && j > i, "README.md lacks the config-table markers")
	want := s[:i+len(tableBegin)] + Markdown() + s[j:]
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		return
	}
	assert.Equal(t, want, s, "README's variable table is stale: go test ./goimpl/config -update")
}

func TestAlgoAndTopologyVariables(t *testing.T) {
	c, err := Load(env(map[string]string{"GOHCCL_ALGO": "allreduce=level0:ring;level1:tree/allgather=ring",
		"GOHCCL_RANKS_PER_NODE": "8", "GOHCCL_INTER_BW": "12.5", "GOHCCL_INTRA_LATENCY": "2"}))
	require.NoError(t, err)
	assert.Equal(t, 8, c.RanksPerNode)
	assert.Equal(t, 12.5e9, c.InterBW)
	assert.InDelta(t, 2e-6, c.IntraLatency, 1e-15)
	assert.Equal(t, 0, Default().RanksPerNode)
	// Unset, the inter-node figures are measured at init: 0 says so.
	assert.Zero(t, Default().InterBW)
	assert.Zero(t, Default().InterLatency)
	assert.Zero(t, c.InterLatency)
	for name, val := range map[string]string{"GOHCCL_ALGO": "level0:tree", "GOHCCL_RANKS_PER_NODE": "0",
		"GOHCCL_INTER_BW": "fast", "GOHCCL_INTRA_LATENCY": "-1"} {
		_, err := Load(env(map[string]string{name: val}))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	_, err = Load(env(map[string]string{"GOHCCL_ALGO": "bogus"}))
	assert.ErrorContains(t, err, "valid forms")
}

func TestRuntimeLibraries(t *testing.T) {
	assert.Empty(t, Default().CUDALibrary)
	assert.Empty(t, Default().ACLLibrary)
	c, err := Load(env(map[string]string{"GOHCCL_CUDA_LIBRARY": " /opt/cuda/libcudart.so.12 ", "GOHCCL_ACL_LIBRARY": "/x/libascendcl.so"}))
	require.NoError(t, err)
	assert.Equal(t, "/opt/cuda/libcudart.so.12", c.CUDALibrary)
	assert.Equal(t, "/x/libascendcl.so", c.ACLLibrary)
}

// TestBoundsAndNonNumbers: a scratch larger than the stated share of
// physical memory (which the Go runtime would abort the process for), and
// NaN or infinite figures for the tuner, are refused naming the variable.
func TestBoundsAndNonNumbers(t *testing.T) {
	for name, val := range map[string]string{
		"GOHCCL_BUFFSIZE":      "1024G",
		"GOHCCL_INTRA_BW":      "nan",
		"GOHCCL_INTER_BW":      "NaN",
		"GOHCCL_INTRA_LATENCY": "inf",
		"GOHCCL_INTER_LATENCY": "-Inf",
		"GOHCCL_SIMD":          "avx9000",
		"GOHCCL_WAIT":          "often",
	} {
		_, err := Load(env(map[string]string{name: val}))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name+"=", name)
	}
	if mem := PhysicalMemory(); mem > 0 {
		_, err := Load(env(map[string]string{"GOHCCL_BUFFSIZE": strconv.FormatInt(mem/MaxBuffShare+1, 10)}))
		assert.ErrorContains(t, err, "physical memory")
		_, err = Load(env(map[string]string{"GOHCCL_BUFFSIZE": strconv.FormatInt(min(mem/MaxBuffShare, 64<<20), 10)}))
		assert.NoError(t, err)
	}
}

// TestSharedSettings: the settings every rank must agree on, normalised, so
// that 8M and 8388608 agree and a difference in any of them shows.
func TestSharedSettings(t *testing.T) {
	a, err := Load(env(map[string]string{"GOHCCL_BUFFSIZE": "8M", "GOHCCL_DEBUG": "INFO"}))
	require.NoError(t, err)
	b, err := Load(env(map[string]string{"GOHCCL_BUFFSIZE": "8388608", "GOHCCL_SOCKET_IFNAME": "eth7"}))
	require.NoError(t, err)
	assert.Equal(t, a.Shared(), b.Shared(), "per-rank settings must not count")
	for name, val := range map[string]string{"GOHCCL_BUFFSIZE": "16M", "GOHCCL_TRANSPORT": "tcp", "GOHCCL_ALGO": "ring",
		"GOHCCL_RANKS_PER_NODE": "2", "GOHCCL_INTRA_BW": "7", "GOHCCL_INTRA_LATENCY": "3"} {
		c, err := Load(env(map[string]string{name: val}))
		require.NoError(t, err, name)
		assert.NotEqual(t, a.Shared()[name], c.Shared()[name], name)
	}
}

func TestNetworkVariables(t *testing.T) {
	c := Default()
	assert.Equal(t, 5*time.Second, c.PeerTimeout)
	assert.Zero(t, c.PortLo)
	assert.Zero(t, c.PortHi)
	c, err := Load(env(map[string]string{"GOHCCL_PEER_TIMEOUT": "2.5", "GOHCCL_PORT_RANGE": "29600-29700"}))
	require.NoError(t, err)
	assert.Equal(t, 2500*time.Millisecond, c.PeerTimeout)
	assert.Equal(t, [2]int{29600, 29700}, [2]int{c.PortLo, c.PortHi})
	c, err = Load(env(map[string]string{"GOHCCL_PEER_TIMEOUT": "0", "GOHCCL_PORT_RANGE": "30000"}))
	require.NoError(t, err)
	assert.Zero(t, c.PeerTimeout)
	assert.Equal(t, [2]int{30000, 30000}, [2]int{c.PortLo, c.PortHi})
	for name, bad := range map[string][]string{
		"GOHCCL_PEER_TIMEOUT": {"soon", "-1", "nan", "0.5", "1e9"},
		"GOHCCL_PORT_RANGE":   {"x", "10-5", "0-10", "1-70000", "5-"},
	} {
		for _, v := range bad {
			_, err := Load(env(map[string]string{name: v}))
			assert.ErrorContains(t, err, name, "%s=%s", name, v)
		}
	}
}

func TestTraceVariables(t *testing.T) {
	c := Default()
	assert.Equal(t, 2000, c.TraceBuffer)
	assert.Empty(t, c.TraceDir)
	c, err := Load(env(map[string]string{"GOHCCL_TRACE_BUFFER": "0", "GOHCCL_TRACE_DIR": "/tmp/x"}))
	require.NoError(t, err)
	assert.Equal(t, 0, c.TraceBuffer)
	assert.Equal(t, "/tmp/x", c.TraceDir)
	for _, bad := range []string{"-1", "many", "2097152"} {
		_, err := Load(env(map[string]string{"GOHCCL_TRACE_BUFFER": bad}))
		assert.ErrorContains(t, err, "GOHCCL_TRACE_BUFFER", bad)
	}
}
