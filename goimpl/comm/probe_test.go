package comm

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// bootNodes bootstraps n ranks over TCP on loopback, split into nodes of
// perNode ranks, rank r with cfgOf(r).
func bootNodes(t *testing.T, n, perNode int, cfgOf func(r int) config.Config) []*Comm {
	t.Helper()
	store := rendezvous.NewMemStore()
	comms := make([]*Comm, n)
	noErrors(t, reftest.OnRanks(n, func(r int) (err error) {
		cfg := cfgOf(r)
		cfg.RanksPerNode = perNode
		comms[r], err = New(rendezvous.Prefixed(store, "g/"), Options{Rank: r, Size: n, Timeout: 20 * time.Second,
			Config: cfg, MasterAddr: "127.0.0.1"})
		return err
	}))
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// sameInter requires every rank to price the inter-node link alike and
// returns that link.
func sameInter(t *testing.T, comms []*Comm) tune.Link {
	t.Helper()
	m0 := comms[0].tuner.Model()
	for r, c := range comms {
		m := c.tuner.Model()
		require.Equal(t, m0.Inter, m.Inter, "rank %d prices the inter-node link differently from rank 0", r)
		require.Equal(t, m0.NodeBW, m.NodeBW, "rank %d prices the node's shared link differently from rank 0", r)
	}
	// A node's link, where its ranks share one, carries at least what one
	// rank's does.
	require.True(t, m0.NodeBW == 0 || (m0.NodeBW >= m0.Inter.Bandwidth && !math.IsInf(m0.NodeBW, 0)), "node link %g B/s", m0.NodeBW)
	return m0.Inter
}

func TestInterProbeMeasures(t *testing.T) {
	for _, transport := range []string{"tcp", "auto"} {
		comms := bootNodes(t, 5, 2, func(int) config.Config {
			c := smallBuffers()
			c.Transport = transport
			return c
		})
		l := sameInter(t, comms)
		t.Logf("%s: latency %.1fus, bandwidth %.2f GB/s, node %.2f GB/s", transport, l.Latency*1e6, l.Bandwidth/1e9, comms[0].tuner.Model().NodeBW/1e9)
		assert.True(t, l.Latency > 0 && l.Latency < 1 && !math.IsNaN(l.Latency), "latency %g s", l.Latency)
		// Loopback TCP carries far more than 1 MB/s and less than 1 TB/s.
		assert.True(t, l.Bandwidth > 1e6 && l.Bandwidth < 1e12, "bandwidth %g B/s", l.Bandwidth)
		assert.NotEqual(t, tune.DefaultModel().Inter, l, "the defaults, not a measurement")
		// The links are whole after the probe: an all-reduce against numpy's
		// counterpart, the reference sum.
		count := 20011
		inputs := make([][]int64, len(comms))
		bufs := make([][]byte, len(comms))
		for r := range bufs {
			inputs[r] = reftest.Ints(r, count, 17)
			bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
		}
		noErrors(t, runAll(comms, func(c *Comm) error {
			return c.AllReduce(bufs[c.Rank()], count, reduce.Int32, reduce.Sum, 0)
		}))
		for r := range bufs {
			require.Equal(t, reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs)), bufs[r], "rank %d", r)
		}
	}
}

func TestInterGivenWins(t *testing.T) {
	// Rank 0's figures are everyone's, even where a rank's own differ.
	comms := bootNodes(t, 4, 2, func(r int) config.Config {
		c := smallBuffers()
		if r == 0 {
			c.InterLatency, c.InterBW = 7e-6, 3.5e9
		} else {
			c.InterLatency, c.InterBW = 1e-3, 1e6
		}
		return c
	})
	assert.Equal(t, tune.Link{Latency: 7e-6, Bandwidth: 3.5e9}, sameInter(t, comms))
	assert.Zero(t, comms[1].tuner.Model().NodeBW, "given figures say nothing of a shared link")

	// One figure given: it wins, the other is measured.
	comms = bootNodes(t, 4, 2, func(r int) config.Config {
		c := smallBuffers()
		c.InterLatency = 123e-6
		return c
	})
	l := sameInter(t, comms)
	assert.Equal(t, 123e-6, l.Latency)
	assert.True(t, l.Bandwidth > 1e6 && l.Bandwidth < 1e12, "bandwidth %g B/s", l.Bandwidth)
}

func TestInterOneNodeKeepsDefaults(t *testing.T) {
	comms := bootNodes(t, 3, 3, func(int) config.Config { return smallBuffers() })
	assert.Equal(t, tune.DefaultModel().Inter, sameInter(t, comms))
}

func TestParseInterRefusesNonsense(t *testing.T) {
	l, err := parseInter("2e-05 1.25e+09 0 measured between ranks 0 and 2")
	require.NoError(t, err)
	assert.Equal(t, tune.Link{Latency: 2e-5, Bandwidth: 1.25e9}, l.link)
	for _, bad := range []string{"", "1 2 0", "0 1e9 0 x", "1e-5 -3 0 x", "1e-5 +Inf 0 x", "NaN 1e9 0 x", "1e-5 1e9 -1 x", "1e-5 1e9 x", "a b c d"} {
		_, err := parseInter(bad)
		assert.ErrorContains(t, err, "malformed", "%q", bad)
	}
}

func TestInterMeasuredOncePerProcess(t *testing.T) {
	// A communicator over the same hosts reuses the link an earlier one of
	// the process measured; a figure given still wins over it.
	cfg := func(int) config.Config { c := smallBuffers(); c.Transport = "tcp"; c.BuffSize = 1 << 20; return c }
	earlier := bootNodes(t, 4, 2, cfg)
	first := sameInter(t, earlier)
	again := bootNodes(t, 4, 2, cfg)
	assert.Equal(t, first, sameInter(t, again))
	assert.Equal(t, comms0Model(earlier).NodeBW, comms0Model(again).NodeBW)
	withLatency := bootNodes(t, 4, 2, func(r int) config.Config { c := cfg(r); c.InterLatency = 77e-6; return c })
	assert.Equal(t, tune.Link{Latency: 77e-6, Bandwidth: first.Bandwidth}, sameInter(t, withLatency))
}

func comms0Model(comms []*Comm) tune.Model { return comms[0].tuner.Model() }
