package comm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A host is crowded when its ranks outnumber the cores they may run on
// together: ranks bound to a core each (mpirun's default) are not, though
// each says it may use one core; ranks sharing one core are.
func TestHostCrowding(t *testing.T) {
	bound := func(host string, core uint) peerInfo {
		return peerInfo{Host: host, CPUs: 1, Cores: []uint64{1 << core}}
	}
	free := func(host string, cpus int) peerInfo {
		return peerInfo{Host: host, CPUs: cpus, Cores: []uint64{1<<uint(cpus) - 1}}
	}
	cases := []struct {
		name    string
		peers   []peerInfo
		crowded bool
	}{
		{"two ranks each bound to its own core", []peerInfo{bound("a", 0), bound("a", 1)}, false},
		{"two ranks bound to the same core", []peerInfo{bound("a", 0), bound("a", 0)}, true},
		{"four ranks on two cores", []peerInfo{free("a", 2), free("a", 2), free("a", 2), free("a", 2)}, true},
		{"two ranks on two cores", []peerInfo{free("a", 2), free("a", 2)}, false},
		{"cores past the first 64", []peerInfo{
			{Host: "a", CPUs: 1, Cores: []uint64{0, 1}}, {Host: "a", CPUs: 1, Cores: []uint64{0, 2}}}, false},
		{"one crowded host of two", []peerInfo{bound("a", 0), bound("a", 1), bound("b", 0), bound("b", 0)}, true},
		{"masks not said: the fewest cores said", []peerInfo{{Host: "a", CPUs: 1}, {Host: "a", CPUs: 4}}, true},
		{"nothing said", []peerInfo{{Host: "a"}, {Host: "a"}}, false},
	}
	for _, c := range cases {
		require.Equal(t, c.crowded, share(c.peers) > 1, c.name)
	}
	loads := hostLoads([]peerInfo{bound("a", 0), bound("a", 3), free("b", 2), free("b", 2), free("b", 2)})
	require.Equal(t, hostLoad{ranks: 2, cores: 2}, loads["a"])
	require.Equal(t, hostLoad{ranks: 3, cores: 2}, loads["b"])

	mask := affinity()
	require.NotEmpty(t, mask, "this process's affinity mask")
	require.NotZero(t, mask[len(mask)-1], "no trailing zero words")

	// Hosts of one kernel (containers, emulated hosts) share its cores.
	shared := []peerInfo{free("h0/boot", 2), free("h0/boot", 2), free("h1/boot", 2), free("h1/boot", 2)}
	require.Greater(t, share(shared), 1.0, "4 ranks of 2 hostnames on one 2-core kernel")
	require.Equal(t, hostLoad{ranks: 4, cores: 2}, hostLoads(shared)["boot"])
	require.Equal(t, 1.0, share([]peerInfo{free("h0/boot0", 2), free("h0/boot0", 2), free("h1/boot1", 2), free("h1/boot1", 2)}))
	require.Equal(t, "h0/", machine("h0/"), "no boot id: the host identity")

	require.False(t, severalHosts([]string{"a", "a", "a"}))
	require.True(t, severalHosts([]string{"a", "a", "b"}))

	// The group's share is its most crowded machine's ranks per core.
	require.Equal(t, 1.0, share([]peerInfo{free("a", 2), free("a", 2)}))
	require.Equal(t, 2.0, share([]peerInfo{free("a", 2), free("a", 2), free("a", 2), free("a", 2)}))
	require.Equal(t, 1.5, share([]peerInfo{bound("a", 0), bound("a", 1), free("b", 2), free("b", 2), free("b", 2)}))
	require.Equal(t, 4.0, share(append(shared, shared...)), "8 ranks of emulated hosts on 2 cores")
}

// TestAutoMeasures pins where GOHCCL_TUNE=auto measures: one host with a
// core per rank and the engine, or several hosts with a crowded one.
func TestAutoMeasures(t *testing.T) {
	for _, c := range []struct {
		crowded, several, engine, want bool
	}{
		{false, false, true, true},
		{false, false, false, false},
		{true, false, true, false},
		{true, true, true, true},
		{true, true, false, true},
		{false, true, true, false},
	} {
		require.Equal(t, c.want, autoMeasures(c.crowded, c.several, c.engine), "crowded %v, several hosts %v, engine %v", c.crowded, c.several, c.engine)
	}
}
